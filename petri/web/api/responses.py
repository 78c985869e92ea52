"""What the API answers: the response models and the summary of one event's trajectory, computed
from the stored trajectory alone (so a stored run reads back exactly as it was answered)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import pandas as pd
from pydantic import BaseModel, Field, SerializeAsAny, create_model

from petri.core.trajectory import Trajectory
from petri.measure.sample_metrics import SampleMetric, json_number, sample_metrics
from petri.measure.summary import EventSummary
from petri.measure.tables import pairs_table, preservation_summary, segments_table
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


#: ``SampleOut``'s fields before the registered metrics' and after them (the answer's key order).
_SAMPLE_HEAD: dict[str, Any] = {
    "sample": (int, ...),
    "steps": (int, ...),
    "anchors": (list[AnchorOut], ...),
    "final_text": (str, ...),
    "flips": (list[int], Field(description="flips per canvas position (0 at anchors)")),
}
_SAMPLE_TAIL: dict[str, Any] = {
    "argmax": (list[list[int]] | None, Field(None, description="(steps, canvas) raw argmax; on request")),
    "canvas": (list[list[int]] | None, Field(
        None, description="(steps, canvas) the tokens on the canvas after each step (uniform diffusion: accepted draws "
                          "and fresh noise; masked diffusion: committed tokens and the mask token); on request, "
                          "absent for runs stored before it was recorded")),
}
_SAMPLE_MODELS: dict[tuple[SampleMetric, ...], type[BaseModel]] = {}


def sample_model() -> type[BaseModel]:
    """``SampleOut`` for the per-sample metrics registered now (a field per metric with ``api``
    set, :mod:`petri.measure.sample_metrics`; made once per set of metrics)."""
    metrics = tuple(m for m in sample_metrics() if m.api)
    if metrics not in _SAMPLE_MODELS:
        fields: dict[str, Any] = {m.column: (float | None if m.dtype is float else m.dtype, Field(description=m.description))
                  for m in metrics}
        _SAMPLE_MODELS[metrics] = create_model("SampleOut", __module__=__name__, __doc__="One sample of an event.",
                                               **_SAMPLE_HEAD, **fields, **_SAMPLE_TAIL)
    return _SAMPLE_MODELS[metrics]


#: The model of the metrics registered at import (the built-in ones).
if TYPE_CHECKING:
    SampleOut = BaseModel  # to the type checker: what the model made at import is
else:
    SampleOut = sample_model()
#: An answer's sample: validated, serialised and documented with the metrics registered now.
Sample = Annotated[SampleOut, registered(sample_model), SerializeAsAny()]


class SegmentOut(BaseModel):
    sample: int
    left: str
    right: str
    start: int
    end: int
    length: int
    instability: float | None


class PairOut(BaseModel):
    pair: str
    concepts: list[str]
    n_segments: int
    instability: float | None


class PreservationOut(BaseModel):
    anchors: int
    intact: int
    intact_share: float | None
    mean_agreement: float | None


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
    segments: list[SegmentOut]
    pairs: list[PairOut]
    preservation: PreservationOut


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
    metrics = {m.column: (m, m.values(summary)) for m in sample_metrics() if m.api}
    model = sample_model()
    sample_out = []
    for s in range(traj.n_samples):
        sample_out.append(
            model(
                sample=s,
                steps=int(traj.steps[s]),
                anchors=_sample_anchors(traj, anchors, s),
                final_text=traj.final_texts[s],
                flips=flips[s].tolist(),
                **{column: m.json_value(values[s]) for column, (m, values) in metrics.items()},
                argmax=traj.sample_argmax(s).tolist() if include_trajectories else None,
                canvas=traj.canvas[s, : int(traj.steps[s])].tolist()
                if include_trajectories and traj.canvas is not None else None,
            )
        )
    segments = [
        SegmentOut(**{**r, "instability": json_number(r["instability"])})
        for r in _records(segments_table(summary), ("sample", "left", "right", "start", "end", "length", "instability"))
    ]
    pairs = [
        PairOut(pair=r["pair"], concepts=r["pair"].split("|"), n_segments=r["n_segments"],
                instability=json_number(r["instability"]))
        for r in _records(pairs_table(summary), ("pair", "n_segments", "instability"))
    ]
    kept = preservation_summary(anchors)
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
        preservation=PreservationOut(
            anchors=kept["anchors_total"],
            intact=kept["anchors_intact"],
            intact_share=json_number(kept["intact_share"]),
            mean_agreement=json_number(kept["mean_agreement"]),
        ),
    )


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
