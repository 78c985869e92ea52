"""What the API answers: the response models and the summary of one event's trajectory, computed
from the stored trajectory alone (so a stored run reads back exactly as it was answered)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import pandas as pd
from pydantic import BaseModel, Field, SerializeAsAny, create_model

from petri.core.recorded import RECORDED
from petri.core.trajectory import Trajectory
from petri.measure.level_metrics import LevelMetric, metrics
from petri.measure.sample_metrics import SampleMetric, api_type, sample_metrics
from petri.measure.summary import EventSummary
from petri.measure.tables import segments_table
from petri.runs.export import TABLES, run_metadata, run_tables, write_tables
from petri.runs.formats import RESULT_TABLES
from petri.web.api.registered import registered


class ModelOut(BaseModel):
    model_id: str
    device: str
    dtype: str | None = None
    canvas_length: int | None = None
    vocab_size: int | None = None


class AnchorOut(BaseModel):
    concept: str
    start: int
    end: int
    token_ids: list[int]
    intact: bool = Field(description="reading 1: the concept is a whole word of the final text")
    agreement: float = Field(description="reading 2: share of steps whose unforced argmax equals the anchor")


#: ``SampleOut``'s fields before the registered metrics' and after them (the answer's key order): the
#: recorded per-step fields the API answers on request (:data:`petri.core.recorded.RECORDED`, ``api``).
_SAMPLE_HEAD: dict[str, Any] = {
    "sample": (int, ...),
    "steps": (int, ...),
    "anchors": (list[AnchorOut], ...),
    "final_text": (str, ...),
    "flips": (list[int], Field(description="flips per canvas position (0 at anchors)")),
}
_STEP_ROWS = tuple(f for f in RECORDED if f.api)
_SAMPLE_TAIL: dict[str, Any] = {
    f.name: (list[list[int]] | None, Field(None, description=f"(steps, canvas) {f.meaning}; on request" + (
        ", absent for runs stored before it was recorded" if f.optional else ""))) for f in _STEP_ROWS}
#: Each level's fields before its registered metrics' (segment and pair: the row's keys).
_HEADS: dict[str, dict[str, Any]] = {
    "segment": {"sample": (int, ...), "left": (str, ...), "right": (str, ...), "start": (int, ...), "end": (int, ...),
                "length": (int, ...)},
    "pair": {"pair": (str, ...), "concepts": (list[str], ...)},
    "event": {},
}
#: Each level's model: its name and docstring.
_NAMES = {"sample": ("SampleOut", "One sample of an event."), "segment": ("SegmentOut", "One segment of an event."),
          "pair": ("PairOut", "One concept pair of an event."),
          "event": ("PreservationOut", "The event's figures (its anchors' preservation).")}
_MODELS: dict[tuple, type[BaseModel]] = {}


def _metric_model(level: str, metrics: tuple[SampleMetric | LevelMetric, ...], head: dict[str, Any],
                  tail: dict[str, Any]) -> type[BaseModel]:
    """The response model of ``level`` with a field per metric of ``metrics`` between ``head`` and
    ``tail`` (made once per set of metrics)."""
    key = (level, metrics)
    if key not in _MODELS:
        fields: dict[str, Any] = {m.column: (api_type(m.dtype), Field(description=m.description)) for m in metrics}
        name, doc = _NAMES[level]
        _MODELS[key] = create_model(name, __module__=__name__, __doc__=doc, **head, **fields, **tail)
    return _MODELS[key]


def sample_model() -> type[BaseModel]:
    """``SampleOut`` for the per-sample metrics registered now (a field per metric with ``api``
    set, :mod:`petri.measure.sample_metrics`)."""
    return _metric_model("sample", tuple(m for m in sample_metrics() if m.api), _SAMPLE_HEAD, _SAMPLE_TAIL)


def level_model(level: str) -> type[BaseModel]:
    """``SegmentOut``, ``PairOut`` or ``PreservationOut`` for the ``level`` metrics registered now (a
    field per metric with ``api`` set, :mod:`petri.measure.level_metrics`)."""
    return _metric_model(level, tuple(m for m in metrics(level) if m.api), _HEADS[level], {})


#: The models of the metrics registered at import (the built-in ones).
if TYPE_CHECKING:  # to the type checker: what the models made at import are
    SampleOut = BaseModel
    SegmentOut = BaseModel
    PairOut = BaseModel
    PreservationOut = BaseModel
else:
    SampleOut = sample_model()
    SegmentOut, PairOut, PreservationOut = (level_model(level) for level in ("segment", "pair", "event"))
#: An answer's sample, segment, pair and event figures: validated, serialised and documented with the
#: metrics registered now.
Sample = Annotated[SampleOut, registered(sample_model), SerializeAsAny()]
Segment = Annotated[SegmentOut, registered(lambda: level_model("segment")), SerializeAsAny()]
Pair = Annotated[PairOut, registered(lambda: level_model("pair")), SerializeAsAny()]
Preservation = Annotated[PreservationOut, registered(lambda: level_model("event")), SerializeAsAny()]


class EventOut(BaseModel):
    index: int
    event: str
    group: str | None
    template: str
    prompt: str
    seed: int | None
    n_samples: int
    timings: dict[str, float]
    samples: list[Sample]
    segments: list[Segment]
    pairs: list[Pair]
    preservation: Preservation


class RunOut(BaseModel):
    run_id: str
    kind: str = "seed"
    status: str
    model: ModelOut
    settings: dict[str, Any]
    events: list[EventOut]
    timings: dict[str, float]
    csv: dict[str, str] = Field(description="download links of the tidy tables")
    created_at: str | None = None
    finished_at: str | None = None
    error: str | None = None
    probe: dict[str, Any] | None = Field(None, description="a probe run's stored documents: read (kind probe); "
                                         "predictions, summary, reliability, evaluation (kind probe-eval)")


class StudyOut(BaseModel):
    run_id: str
    kind: str = "study"
    status: str
    study_id: str
    model: ModelOut
    settings: dict[str, Any]
    samples: int
    seed: int
    templates: list[str]
    batches: int
    computed: int = Field(description="batches sampled by this request")
    resumed: int = Field(description="batches found already stored (an interrupted or repeated run)")
    timings: dict[str, float]
    csv: dict[str, str] = Field(description="download links of the tidy tables (GET /api/runs/{run_id} has the rest)")


class QueueOut(BaseModel):
    running: str | None = Field(description="id of the job running now, if any")
    queued: int = Field(description="jobs waiting")
    max_queued: int = Field(description="jobs that may wait at once; one more is a 503")
    sync_max_token_steps: int = Field(description="the work a synchronous POST /api/seed may ask for")


class HealthOut(BaseModel):
    status: str
    model_id: str
    device: str
    dtype: str
    canvas_length: int
    busy: bool
    limits: dict[str, str]
    queue: QueueOut | None = None
    public: bool | None = Field(None, description="jobs and runs are visible to their submitters only")


class JobOut(BaseModel):
    """A job's state (``GET /api/jobs/{job_id}``)."""

    job_id: str
    kind: str
    status: str = Field(description="queued, running, done, failed, cancelled or interrupted")
    progress: dict[str, Any] = Field(description="done, total and unit (step for a dish, batch for a study)")
    run_id: str | None = Field(None, description="the run the job writes (GET /api/runs/{run_id})")
    error: str | None = None
    created: str
    started: str | None = None
    finished: str | None = None


class JobSubmitted(BaseModel):
    """The answer to a job submission (202)."""

    job_id: str
    status_url: str
    events_url: str
    token: str | None = Field(None, description="on a public server: send it as X-Petri-Token to watch or cancel")


class JobList(BaseModel):
    jobs: list[JobOut]
    limit: int
    offset: int


# ----------------------------------------------------------------------------------- summaries


def _records(df: pd.DataFrame, columns: Sequence[str]) -> list[dict]:
    return df[list(columns)].to_dict(orient="records")


def _sample_anchors(traj: Trajectory, anchors: pd.DataFrame, s: int) -> list[AnchorOut]:
    """Sample ``s``'s anchors (rows of :func:`~petri.measure.tables.anchors_table`) in canvas order."""
    rows = anchors[anchors["sample"] == s]
    out = [
        AnchorOut(concept=span.concept, start=span.start, end=span.end, token_ids=list(span.token_ids),
                  intact=bool(row.intact), agreement=float(row.agreement))
        for span, row in zip(traj.anchors[s], rows.itertuples())
    ]
    return sorted(out, key=lambda a: a.start)


def event_summary(
    index: int, traj: Trajectory, group: str | None, include_trajectories: bool = False
) -> EventOut:
    """Everything ``POST /api/seed`` reports about one event, from its trajectory alone (its
    :class:`~petri.measure.summary.EventSummary`: the flips counted once for every table)."""
    summary = EventSummary(traj)
    flips = summary.flips
    anchors = summary.anchors
    per_sample = {m.column: (m, m.values(summary)) for m in sample_metrics() if m.api}
    model = sample_model()
    sample_out = []
    for s in range(traj.n_samples):
        ran = int(traj.steps[s])
        sample_out.append(
            model(
                sample=s,
                steps=ran,
                anchors=_sample_anchors(traj, anchors, s),
                final_text=traj.final_texts[s],
                flips=flips[s].tolist(),
                **{column: m.json_value(values[s]) for column, (m, values) in per_sample.items()},
                **{f.name: getattr(traj, f.name)[s, :ran].tolist()
                   if include_trajectories and getattr(traj, f.name) is not None else None for f in _STEP_ROWS},
            )
        )
    segments = _level_rows(summary, "segment", _records(segments_table(summary), tuple(_HEADS["segment"])))
    names = ["|".join(p) for p in summary.pair_segments]  # concepts as the name splits (a concept may hold "|")
    pairs = _level_rows(summary, "pair", [{"pair": name, "concepts": name.split("|")} for name in names])
    return EventOut(
        index=index,
        event=traj.event,
        group=group,
        template=traj.template,
        prompt=traj.prompt,
        seed=traj.seed,
        n_samples=traj.n_samples,
        timings={k: float(v) for k, v in traj.timings.items()},
        samples=sample_out,
        segments=segments,
        pairs=pairs,
        preservation=_level_rows(summary, "event", [{}])[0],
    )


def _level_rows(summary: EventSummary, level: str, keys: list[dict]) -> list[BaseModel]:
    """The API's rows of ``level`` (:func:`level_model`): each row's ``keys`` then its registered
    metrics' values (``keys`` one dict per row of the level, in the level's order)."""
    model = level_model(level)
    columns = [(m, m.values(summary)) for m in metrics(level) if m.api]
    return [model(**row, **{m.column: m.json_value(values[i]) for m, values in columns}) for i, row in enumerate(keys)]


def csv_links(run_id: str, kind: str = "seed") -> dict[str, str]:
    """The download link of each table of a run of ``kind``: the tidy tables of a seed or study, the
    result tables of its kind for a run that stores documents (a probe read, an evaluation)."""
    names = [t.name for t in RESULT_TABLES.values() if t.kind == kind] or list(TABLES)
    return {name: f"/api/runs/{run_id}/{name}.csv" for name in names}


def model_out(info: dict, model_id: str | None = None, device: str | None = None) -> ModelOut:
    """The served model (``info``: its ``describe()``, by default), or a stored run's model as far as
    the run records it."""
    if model_id is None or model_id == info["model_id"]:
        return ModelOut(**info)
    return ModelOut(model_id=model_id, device=device or "unknown")


def write_run_files(
    run_id: str, trajectories: Sequence[Trajectory], groups: Sequence[str | None], folder, token_text=None,
) -> list:
    """The run's tidy CSVs (as ``GET /api/runs/{id}/{table}.csv`` serves them; final tokens decoded
    by ``token_text``) and ``run.json`` (model, settings, seeds, prompts, timings, versions) in
    ``folder``; returns the paths."""
    tables = run_tables(trajectories, groups, token_text)
    meta = run_metadata(trajectories, run_id=run_id, groups=list(groups))
    return list(write_tables(tables, folder, meta).values())
