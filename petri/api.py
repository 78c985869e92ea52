"""The HTTP API (FastAPI, pydantic v2 at the edge) and the app factory that mounts the Gradio UI.

Routes (OpenAPI docs at ``/docs``):

- ``POST /api/seed``: concepts, one event or a list of events (with group labels), a template,
  samples, sampler settings, a seed → run id, model, per-sample anchor layout, final text, steps,
  flips, segments, preservation, per-pair instability, timings; the per-step argmax on request.
- ``GET /api/runs`` (recent runs), ``GET /api/runs/{run_id}`` and
  ``GET /api/runs/{run_id}/{table}.csv`` (``positions``, ``segments``, ``samples``, ``pairs``):
  stored results, recomputed from the stored trajectories.
- ``GET /api/health``: model, device, dtype, whether a job is running, and the request limits.

Every bad field is a 4xx whose body names the field (``detail[*].loc``); a busy model is a 503
with ``Retry-After``. Sampling runs in a worker thread, so the server stays responsive. The server
never loads a model or reads a file named by a request: run ids are checked with
:func:`~petri.store.check_run_id` and tables come from a fixed list.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Annotated, Any

import numpy as np
import pandas as pd
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from petri.dish import DEFAULT_TEMPLATE, Dish, LayoutError
from petri.export import TABLES, run_metadata, write_tables
from petri.metrics import anchor_agreement, anchor_intact_in_text, flip_counts
from petri.seeding import plan_dish
from petri.service import BusyError, PetriService, SeedEvent, SeedResult
from petri.store import check_run_id
from petri.tables import pairs_table, samples_table, segments_table
from petri.trajectory import SamplerSettings, Trajectory

log = logging.getLogger("petri.api")

# ----------------------------------------------------------------------------------- limits

MIN_CONCEPTS = 2
MAX_CONCEPTS = 8
MAX_CONCEPT_CHARS = 64
MAX_SAMPLES = 64
MAX_EVENTS = 24
MAX_TEXT_CHARS = 2000
MAX_GROUP_CHARS = 64
MAX_STEPS = 256
MAX_SEED = 2**32 - 1
#: ``include_trajectories`` returns samples × steps × canvas integers per event; capped per response.
MAX_TRAJECTORY_CELLS = 8_000_000
#: Seconds a client is told to wait (``Retry-After``) when the model is busy.
RETRY_AFTER_S = 5

LIMITS = {
    "concepts": f"{MIN_CONCEPTS}-{MAX_CONCEPTS} per request, each 1-{MAX_CONCEPT_CHARS} characters, "
    "no control characters, no leading/trailing whitespace, no duplicates",
    "samples": f"1-{MAX_SAMPLES} per event",
    "events": f"1-{MAX_EVENTS} per request",
    "text": f"event and template at most {MAX_TEXT_CHARS} characters each; group labels at most "
    f"{MAX_GROUP_CHARS}",
    "max_denoising_steps": f"1-{MAX_STEPS}",
    "seed": f"0-{MAX_SEED}",
    "positions": "one canvas start per concept; every anchor must fit the free canvas without overlap",
    "include_trajectories": f"at most {MAX_TRAJECTORY_CELLS:,} argmax values (events × samples × steps × canvas) "
    "per response",
}


def gpu_task(fn: Callable) -> Callable:
    """Hugging Face ZeroGPU: run ``fn`` under ``spaces.GPU`` when the ``spaces`` package is there."""
    try:
        import spaces  # type: ignore[import-not-found]
    except ImportError:
        return fn
    return spaces.GPU(duration=120)(fn)


@gpu_task
def run_seed(
    service: PetriService,
    events: Sequence[SeedEvent],
    n_samples: int,
    settings: SamplerSettings,
    seed: int,
    on_step=None,
    wait_s: float | None = None,
) -> SeedResult:
    """The one model call the API and the UI make (through the service and its lock)."""
    return service.seed(events, n_samples, settings, seed=seed, on_step=on_step, wait_s=wait_s)


# ----------------------------------------------------------------------------------- request models


def _no_control(value: str, allow_newlines: bool) -> str:
    allowed = {"\n", "\r", "\t"} if allow_newlines else set()
    for ch in value:
        if ch not in allowed and unicodedata.category(ch) in ("Cc", "Cs"):
            raise ValueError(f"contains the control character {ch!r}")
    return value


def _concept_check(value: str) -> str:
    _no_control(value, allow_newlines=False)
    if value != value.strip():
        raise ValueError("has leading or trailing whitespace")
    return value


Concept = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_CONCEPT_CHARS), AfterValidator(_concept_check)
]
Text = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS),
    AfterValidator(lambda v: _no_control(v, allow_newlines=True)),
]
Group = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_GROUP_CHARS),
    AfterValidator(lambda v: _no_control(v, allow_newlines=False)),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class EventIn(_Strict):
    """One event the model reads, with an optional group label (e.g. ``benign``)."""

    event: Text
    group: Group | None = None


class SettingsIn(_Strict):
    """Sampler settings; every field is optional and defaults to the model's generation config."""

    max_denoising_steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    t_min: float | None = Field(None, gt=0, le=10)
    t_max: float | None = Field(None, gt=0, le=10)
    entropy_bound: float | None = Field(None, ge=0, le=1e6)
    stability_threshold: int | None = Field(None, ge=0, le=16)
    confidence_threshold: float | None = Field(None, ge=0, le=1e3)
    adaptive_stop: bool | None = Field(None, description="false: always run every step")
    pin_thought_channel: bool | None = Field(
        None, description="pin the empty thought block at the canvas start (chat-template models)"
    )

    def apply(self, defaults: SamplerSettings) -> SamplerSettings:
        names = (
            "max_denoising_steps", "t_min", "t_max", "entropy_bound",
            "stability_threshold", "confidence_threshold", "pin_thought_channel",
        )
        settings = replace(defaults, **{n: getattr(self, n) for n in names if getattr(self, n) is not None})
        if self.adaptive_stop is False:
            settings = replace(settings, stability_threshold=None, confidence_threshold=None)
        elif self.adaptive_stop is True and settings.stability_threshold is None:
            defaults_on = SamplerSettings()
            settings = replace(
                settings,
                stability_threshold=self.stability_threshold or defaults_on.stability_threshold,
                confidence_threshold=self.confidence_threshold or defaults_on.confidence_threshold,
            )
        return settings


class SeedRequest(_Strict):
    """A seeding request. Give ``event`` (and optionally ``group``) or ``events``, not both."""

    concepts: list[Concept] = Field(min_length=MIN_CONCEPTS, max_length=MAX_CONCEPTS, examples=[["order", "inventory", "person"]])
    event: Text | None = Field(None, examples=["Only 90 units are in stock, but a customer ordered 120."])
    group: Group | None = None
    events: list[EventIn] | None = Field(None, min_length=1, max_length=MAX_EVENTS)
    template: Text = DEFAULT_TEMPLATE
    positions: list[Annotated[int, Field(ge=0, le=1_000_000)]] | None = Field(
        None, description="canvas start of each concept's slot (one per concept); default: spread evenly"
    )
    shuffle: bool = Field(True, description="assign concepts to slots in a seeded random order per sample")
    samples: int = Field(8, ge=1, le=MAX_SAMPLES)
    settings: SettingsIn = Field(default_factory=SettingsIn)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    include_trajectories: bool = Field(False, description="add each sample's per-step raw argmax")


# ----------------------------------------------------------------------------------- response models


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


class SampleOut(BaseModel):
    sample: int
    steps: int
    anchors: list[AnchorOut]
    final_text: str
    flips: list[int] = Field(description="flips per canvas position (0 at anchors)")
    mean_flips_free: float | None
    settled_share: float | None
    argmax: list[list[int]] | None = Field(None, description="(steps, canvas) raw argmax; on request")


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
    samples: list[SampleOut]
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


class HealthOut(BaseModel):
    status: str
    model_id: str
    device: str
    dtype: str
    canvas_length: int
    busy: bool
    limits: dict[str, str]


# ----------------------------------------------------------------------------------- summaries


def _num(value) -> float | None:
    """JSON-safe float: NaN/inf → None."""
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def _records(df: pd.DataFrame, columns: Sequence[str]) -> list[dict]:
    return df[list(columns)].to_dict(orient="records")


def event_summary(
    index: int, traj: Trajectory, group: str | None, include_trajectories: bool = False
) -> EventOut:
    """Everything ``POST /api/seed`` reports about one event, from its trajectory alone."""
    flips = flip_counts(traj.argmax, traj.steps, traj.anchor_mask)
    samples = samples_table(traj)
    agreement = anchor_agreement(traj.argmax, traj.steps, traj.anchors)
    sample_out, n_anchors, n_intact, agreements = [], 0, 0, []
    for s in range(traj.n_samples):
        spans = traj.anchors[s]
        anchors = []
        for span, agree in zip(spans, agreement[s]):
            intact = anchor_intact_in_text(traj.final_texts[s], span.concept)
            anchors.append(
                AnchorOut(
                    concept=span.concept, start=span.start, end=span.end, token_ids=list(span.token_ids),
                    intact=intact, agreement=agree,
                )
            )
            n_anchors += 1
            n_intact += intact
            agreements.append(agree)
        row = samples.iloc[s]
        sample_out.append(
            SampleOut(
                sample=s,
                steps=int(traj.steps[s]),
                anchors=sorted(anchors, key=lambda a: a.start),
                final_text=traj.final_texts[s],
                flips=flips[s].tolist(),
                mean_flips_free=_num(row["mean_flips_free"]),
                settled_share=_num(row["settled_share"]),
                argmax=traj.sample_argmax(s).tolist() if include_trajectories else None,
            )
        )
    segs = segments_table(traj)
    segments = [
        SegmentOut(**{**r, "instability": _num(r["instability"])})
        for r in _records(segs, ("sample", "left", "right", "start", "end", "length", "instability"))
    ]
    pairs = [
        PairOut(pair=r["pair"], concepts=r["pair"].split("|"), n_segments=r["n_segments"], instability=_num(r["instability"]))
        for r in _records(pairs_table(traj), ("pair", "n_segments", "instability"))
    ]
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
            anchors=n_anchors,
            intact=n_intact,
            intact_share=n_intact / n_anchors if n_anchors else None,
            mean_agreement=_num(np.mean(agreements)) if agreements else None,
        ),
    )


def csv_links(run_id: str) -> dict[str, str]:
    return {name: f"/api/runs/{run_id}/{name}.csv" for name in TABLES}


def run_table(trajectories: Sequence[Trajectory], groups: Sequence[str | None], name: str) -> pd.DataFrame:
    """One tidy table over a run's events, with ``event_index`` and ``group`` beside ``event``."""
    frames = []
    for index, (traj, group) in enumerate(zip(trajectories, groups)):
        frame = TABLES[name](traj)
        frame.insert(1, "group", group if group is not None else "")
        frame.insert(1, "event_index", index)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def table_csv(table: pd.DataFrame) -> str:
    buffer = io.StringIO()
    table.to_csv(buffer, index=False, quoting=csv.QUOTE_NONNUMERIC)
    return buffer.getvalue()


# ----------------------------------------------------------------------------------- errors

RunId = Annotated[str, PathParam(description="a run id: 8-64 lowercase hex characters", max_length=64)]
TableName = Annotated[str, PathParam(description="positions, segments, samples or pairs", max_length=32)]


class FieldError(Exception):
    """A request field that passed pydantic but not the model's checks (layout, template)."""

    def __init__(self, loc: Sequence[str | int], msg: str, kind: str = "value_error", **extra):
        self.loc, self.msg, self.kind, self.extra = list(loc), msg, kind, extra
        super().__init__(msg)


def _safe_error(error: dict) -> dict:
    """A pydantic error as JSON-safe data: type, loc, msg and (short, plain) input only; a NaN or a
    huge payload is never echoed back."""
    out = {"type": str(error.get("type", "")), "loc": [p if isinstance(p, int) else str(p) for p in error.get("loc", ())],
           "msg": str(error.get("msg", ""))}
    value = error.get("input")
    if isinstance(value, bool) or value is None or isinstance(value, int):
        out["input"] = value
    elif isinstance(value, float):
        out["input"] = _num(value)
    elif isinstance(value, str):
        out["input"] = value[:200]
    return out


def _field_error_body(err: FieldError) -> dict:
    return {"detail": [{"type": err.kind, "loc": err.loc, "msg": err.msg, **err.extra}]}


def _layout_loc(err: LayoutError, concepts: Sequence[str]) -> list:
    index = list(concepts).index(err.concept) if err.concept in concepts else None
    return ["body", "concepts"] + ([index] if index is not None else [])


def _busy(err: BusyError) -> HTTPException:
    return HTTPException(
        status_code=503,
        detail=f"busy: {err}. The model runs one job at a time; retry in a few seconds.",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


# ----------------------------------------------------------------------------------- routes


def build_events(request: SeedRequest, lm_defaults: SamplerSettings) -> tuple[list[SeedEvent], SamplerSettings]:
    if request.event is not None and request.events is not None:
        raise FieldError(["body", "events"], "give either 'event' or 'events', not both")
    if request.event is None and request.events is None:
        raise FieldError(["body", "event"], "an event is needed: give 'event' (one) or 'events' (a list)")
    if request.group is not None and request.event is None:
        raise FieldError(["body", "group"], "'group' goes with 'event'; with 'events' give each event its group")
    if request.positions is not None and len(request.positions) != len(request.concepts):
        raise FieldError(
            ["body", "positions"],
            f"{len(request.positions)} positions given for {len(request.concepts)} concepts (one per concept)",
        )
    items = [EventIn(event=request.event, group=request.group)] if request.event is not None else request.events
    settings = request.settings.apply(lm_defaults)
    events = []
    for index, item in enumerate(items):
        try:
            dish = Dish(
                concepts=tuple(request.concepts),
                event=item.event,
                template=request.template,
                positions=tuple(request.positions) if request.positions is not None else None,
                shuffle=request.shuffle,
            )
        except LayoutError as err:
            raise FieldError(_layout_loc(err, request.concepts), err.reason, "layout_error", concept=err.concept) from None
        except ValueError as err:
            field = str(err).split(":", 1)[0]
            raise FieldError(["body", field if field in SeedRequest.model_fields else "concepts"], str(err)) from None
        events.append(SeedEvent(dish, item.group))
    return events, settings


def prepare_seed(request: SeedRequest, lm) -> tuple[list[SeedEvent], SamplerSettings]:
    """The request's events and settings, every layout checked (no model work): raises
    :class:`FieldError` naming the field. The API and the UI both go through it."""
    events, settings = build_events(request, lm.default_settings())
    cells = len(events) * request.samples * settings.max_denoising_steps * lm.canvas_length
    if request.include_trajectories and cells > MAX_TRAJECTORY_CELLS:
        raise FieldError(
            ["body", "include_trajectories"],
            f"up to {cells:,} argmax values (events × samples × max steps × canvas) is more than one response "
            f"carries ({MAX_TRAJECTORY_CELLS:,}); ask for fewer events or samples, or read the stored run's CSVs",
        )
    for index, event in enumerate(events):
        try:
            plan_dish(lm, event.dish, request.samples, settings, request.seed)
        except LayoutError as err:
            raise FieldError(_layout_loc(err, request.concepts), err.reason, "layout_error", concept=err.concept) from None
        except ValueError as err:
            loc = ["body", "template"] if str(err).startswith("template") else ["body", "events", index]
            raise FieldError(loc, str(err)) from None
    return events, settings


def write_run_files(
    run_id: str, trajectories: Sequence[Trajectory], groups: Sequence[str | None], folder
) -> list:
    """The run's tidy CSVs (as ``GET /api/runs/{id}/{table}.csv`` serves them) and ``run.json``
    (model, settings, seeds, prompts, timings, versions) in ``folder``; returns the paths."""
    tables = {name: run_table(trajectories, groups, name) for name in TABLES}
    meta = run_metadata(trajectories, run_id=run_id, groups=list(groups))
    return list(write_tables(tables, folder, meta).values())


def create_api(service: PetriService, app: FastAPI, busy_wait_s: float = 0.0) -> FastAPI:
    """Register the ``/api`` routes on ``app`` (before anything is mounted at ``/``)."""
    lm = service.lm

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, err: RequestValidationError):
        return JSONResponse({"detail": [_safe_error(e) for e in err.errors()]}, status_code=422)

    @app.exception_handler(FieldError)
    async def _field_error(_: Request, err: FieldError):
        return JSONResponse(_field_error_body(err), status_code=422)

    @app.exception_handler(BusyError)
    async def _busy_error(_: Request, err: BusyError):
        exc = _busy(err)
        return JSONResponse({"detail": exc.detail}, status_code=503, headers=exc.headers)

    def model_out(model_id: str | None = None, device: str | None = None) -> ModelOut:
        info = lm.describe()
        if model_id is None or model_id == info["model_id"]:
            return ModelOut(**info)
        return ModelOut(model_id=model_id, device=device or "unknown")

    @app.get("/api/health", response_model=HealthOut, tags=["api"])
    def health() -> HealthOut:
        info = lm.describe()
        return HealthOut(
            status="ok", model_id=info["model_id"], device=info["device"], dtype=info["dtype"],
            canvas_length=info["canvas_length"], busy=service.busy, limits=LIMITS,
        )

    @app.post(
        "/api/seed",
        response_model=RunOut,
        response_model_exclude_none=False,
        tags=["api"],
        responses={422: {"description": "a bad field (named in detail[*].loc)"}, 503: {"description": "busy"}},
    )
    async def seed(request: SeedRequest) -> RunOut:
        """Sample every event (one batch of ``samples`` per event) with the concepts pinned."""
        events, settings = prepare_seed(request, lm)
        if service.busy and busy_wait_s <= 0:
            raise _busy(BusyError("a model job is already running"))
        try:
            result = await run_in_threadpool(
                run_seed, service, events, request.samples, settings, request.seed, None, busy_wait_s
            )
        except BusyError as err:
            raise _busy(err) from None
        summaries = [
            event_summary(i, traj, group, request.include_trajectories)
            for i, (traj, group) in enumerate(zip(result.trajectories, result.groups))
        ]
        run = service.store.get_run(result.run_id) or {}
        return RunOut(
            run_id=result.run_id,
            status=run.get("status", "done"),
            model=model_out(),
            settings=settings.to_dict(),
            events=summaries,
            timings={
                "wall_s": result.wall_s,
                "sampling_s": float(sum(t.timings.get("total_s", 0.0) for t in result.trajectories)),
            },
            csv=csv_links(result.run_id),
            created_at=run.get("created_at"),
            finished_at=run.get("finished_at"),
        )

    def load_run(run_id: str) -> tuple[dict, list]:
        try:
            check_run_id(run_id)
        except ValueError:
            raise HTTPException(404, detail=f"run_id: no run {run_id[:80]!r} (run ids are 8-64 lowercase hex characters)") from None
        run = service.store.get_run(run_id)
        if run is None:
            raise HTTPException(404, detail=f"run_id: no run {run_id!r}")
        return run, service.store.load_events(run_id)

    @app.get("/api/runs", tags=["api"])
    def list_runs(limit: int = Query(20, ge=1, le=200)) -> list[dict]:
        """The most recent runs (id, kind, model, status, times, events stored)."""
        keys = ("run_id", "kind", "model_id", "status", "created_at", "finished_at", "events_stored", "error")
        return [{k: r.get(k) for k in keys} for r in service.store.list_runs(limit)]

    @app.get("/api/runs/{run_id}", response_model=RunOut, tags=["api"])
    def get_run(run_id: RunId, include_trajectories: bool = False) -> RunOut:
        """A stored run, every number recomputed from its stored trajectories."""
        run, stored = load_run(run_id)
        trajectories = [t for _, _, t in stored]
        first = trajectories[0] if trajectories else None
        cells = sum(t.argmax.size for t in trajectories)
        if include_trajectories and cells > MAX_TRAJECTORY_CELLS:
            raise FieldError(["query", "include_trajectories"],
                             f"{cells:,} argmax values is more than one response carries ({MAX_TRAJECTORY_CELLS:,})")
        return RunOut(
            run_id=run_id,
            kind=run["kind"],
            status=run["status"],
            model=model_out(run["model_id"], first.device if first else None),
            settings=first.settings.to_dict() if first else run["request"].get("settings", {}),
            events=[event_summary(i, t, g, include_trajectories) for i, (_, g, t) in enumerate(stored)],
            timings={"sampling_s": float(sum(t.timings.get("total_s", 0.0) for t in trajectories))},
            csv=csv_links(run_id),
            created_at=run["created_at"],
            finished_at=run["finished_at"],
            error=run["error"],
        )

    @app.get("/api/runs/{run_id}/{table}.csv", tags=["api"], response_class=Response,
             responses={200: {"content": {"text/csv": {}}}})
    def get_table(run_id: RunId, table: TableName) -> Response:
        """A tidy table of a stored run: one of ``positions``, ``segments``, ``samples``, ``pairs``."""
        if table not in TABLES:
            raise HTTPException(404, detail=f"table: {table[:40]!r} is not one of {', '.join(TABLES)}")
        run, stored = load_run(run_id)
        if not stored:
            raise HTTPException(404, detail=f"run_id: run {run_id!r} has no stored events (status {run['status']})")
        frame = run_table([t for _, _, t in stored], [g for _, g, _ in stored], table)
        return Response(
            table_csv(frame),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{run_id}-{table}.csv"'},
        )

    return app


def create_app(
    service: PetriService,
    *,
    ui: bool = True,
    model_source: str | None = None,
    busy_wait_s: float = 0.0,
) -> FastAPI:
    """The whole web app: ``/api/*`` routes, OpenAPI docs at ``/docs``, the Gradio UI at ``/``.

    ``model_source`` (the folder or hub id the model came from) lets the UI show its model card;
    ``busy_wait_s`` is how long an API request waits for a running job before answering 503.
    """
    app = FastAPI(
        title="Concept Petri Dish",
        description="Pin concept anchors on a text-diffusion canvas and measure where the model struggled.",
        version="1.0",
    )
    create_api(service, app, busy_wait_s=busy_wait_s)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, err: Exception):  # pragma: no cover - a bug, logged
        log.exception("unexpected error")
        return JSONResponse({"detail": f"internal error: {type(err).__name__}"}, status_code=500)

    if ui:
        import gradio as gr

        from petri.ui import UI_CSS, build_ui

        blocks = build_ui(service, model_source=model_source)
        app = gr.mount_gradio_app(app, blocks, path="/", css=UI_CSS)
    return app
