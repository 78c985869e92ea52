"""The HTTP API (FastAPI, pydantic v2 at the edge) and the app factory that mounts the Gradio UI.

Routes (OpenAPI docs at ``/docs``):

- ``POST /api/seed``: concepts, one event or a list of events (with group labels), a template,
  samples, sampler settings, a seed → run id, model, per-sample anchor layout, final text, steps,
  flips, segments, preservation, per-pair instability, timings; the per-step argmax on request.
- ``GET /api/runs`` (recent runs), ``GET /api/runs/{run_id}`` and
  ``GET /api/runs/{run_id}/{table}.csv`` (``positions``, ``segments``, ``samples``, ``pairs``):
  stored results, recomputed from the stored trajectories.
- ``POST /api/study``: a study (the study-file schema), samples, settings, a seed → the study run
  (resumable: posting the same body again resumes an interrupted run from the run store).
- ``GET /api/health``: model, device, dtype, whether a job is running, and the request limits.

Every bad field is a 4xx whose body names the field (``detail[*].loc``); a body over
:data:`MAX_BODY_BYTES` is a 413; a busy model is a 503 with ``Retry-After``; a run store that cannot
be written (full disk, read-only folder) is a 507 whose detail says so. Sampling runs in a worker
thread, so the server stays responsive; with ``busy_wait_s`` > 0 at most ``MAX_QUEUED + 1`` API model
jobs are in flight (one running and :data:`MAX_QUEUED` waiting for the lock, or ``MAX_QUEUED + 1``
waiting while the UI holds the model), so waiting requests never take every worker thread. The server never loads a
model or reads a file named by a request: unknown fields are refused, run ids are checked with
:func:`~petri.store.check_run_id` and tables come from a fixed list.
"""

from __future__ import annotations

import functools
import logging
import math
import string
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Annotated, Any

import numpy as np
import pandas as pd
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from starlette.exceptions import HTTPException as StarletteHTTPException

from petri.dish import DEFAULT_TEMPLATE, Dish, LayoutError, encode_prompt
from petri.export import TABLES, run_metadata, run_table, run_tables, write_csv, write_tables
from petri.metrics import anchor_agreement, anchor_intact_in_text, flip_counts
from petri.runner import StudyResult, check_layouts
from petri.seeding import plan_dish
from petri.service import BusyError, PetriService, SeedEvent, SeedResult
from petri.store import StoreError, check_run_id
from petri.study import Study, StudyError, study_from_dict
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
#: Lowest sampler temperature: the logits are divided by it, and a smaller one overflows to inf/NaN
#: (at once in fp16/bf16).
MIN_TEMPERATURE = 0.01
MAX_SEED = 2**32 - 1
#: ``include_trajectories`` returns samples × steps × canvas integers per event; capped per response.
MAX_TRAJECTORY_CELLS = 8_000_000
#: Seconds a client is told to wait (``Retry-After``) when the model is busy.
RETRY_AFTER_S = 5
#: Largest request body (bytes) of a POST route; a bigger one is refused with 413 before it is parsed.
#: The largest valid seed request is far smaller (24 events of 2,000 characters).
MAX_BODY_BYTES = 1024 * 1024
#: Largest file the Gradio UI accepts (a study file); Gradio's own default is no limit at all.
MAX_UPLOAD_BYTES = 4 * 1024 * 1024
#: With ``busy_wait_s`` > 0, a model request is admitted while at most this many API model jobs are
#: in flight (running or waiting for the one-job lock), so at most ``MAX_QUEUED + 1`` are: one running
#: and ``MAX_QUEUED`` waiting, or ``MAX_QUEUED + 1`` waiting while the UI holds the model. One more is
#: refused with 503, so waiting requests never hold every worker thread of the server.
MAX_QUEUED = 8
#: (event, template) batches of one ``POST /api/study`` (``python -m petri study`` has no limit).
MAX_STUDY_BATCHES = 600

LIMITS = {
    "concepts": f"{MIN_CONCEPTS}-{MAX_CONCEPTS} per request, each 1-{MAX_CONCEPT_CHARS} characters, "
    "no control characters, no leading/trailing whitespace, no duplicates",
    "samples": f"1-{MAX_SAMPLES} per event",
    "events": f"1-{MAX_EVENTS} per request",
    "text": f"event and template at most {MAX_TEXT_CHARS} characters each; group labels at most "
    f"{MAX_GROUP_CHARS}",
    "max_denoising_steps": f"1-{MAX_STEPS}",
    "temperature": f"t_min and t_max {MIN_TEMPERATURE}-10",
    "template": "placeholders {event} and {concepts} only (no format specs or attributes); "
    "the prompt plus the canvas must fit the model's positions",
    "seed": f"0-{MAX_SEED}",
    "positions": "one canvas start per concept; every anchor must fit the free canvas without overlap",
    "include_trajectories": f"at most {MAX_TRAJECTORY_CELLS:,} argmax values (events × samples × steps × canvas) "
    "per response",
    "body": f"at most {MAX_BODY_BYTES:,} bytes of JSON per request (else 413)",
    "study": f"at most {MAX_STUDY_BATCHES} (event, template) batches; concepts, events, templates and groups "
    "within the limits above",
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


@gpu_task
def run_study_job(
    service: PetriService,
    study: Study,
    samples: int,
    seed: int,
    settings: SamplerSettings,
    templates: Sequence[str] | None,
    wait_s: float | None = None,
) -> StudyResult:
    """``POST /api/study``'s model call: the resumable study runner under the service's lock."""
    return service.run_study(study, samples=samples, seed=seed, settings=settings, templates=templates, wait_s=wait_s)


# ----------------------------------------------------------------------------------- request models


def _no_control(value: str, allow_newlines: bool, allow_format: bool = True) -> str:
    """Refuse control characters and lone surrogates; with ``allow_format=False`` also invisible
    format characters (zero-width spaces and joiners, bidirectional overrides such as U+202E), which
    would make a label look like another one."""
    allowed = {"\n", "\r", "\t"} if allow_newlines else set()
    for ch in value:
        category = unicodedata.category(ch)
        if ch not in allowed and category in ("Cc", "Cs"):
            raise ValueError(f"contains the control character {ch!r}")
        if not allow_format and category == "Cf":
            raise ValueError(f"contains the invisible format character U+{ord(ch):04X} (zero-width or bidirectional control)")
    return value


def _concept_check(value: str) -> str:
    _no_control(value, allow_newlines=False, allow_format=False)
    if value != value.strip():
        raise ValueError("has leading or trailing whitespace")
    return value


def _template_check(value: str) -> str:
    """Only the bare placeholders ``{event}`` and ``{concepts}``: a format spec (``{event:>999999}``
    would build a prompt of a million characters), a conversion or an attribute/index lookup
    (``{event.__class__}``) is refused."""
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(value) if name is not None]
    except ValueError as err:
        raise ValueError(f"is not a valid template ({err}); use {{event}} and {{concepts}}, double braces for literal ones") from None
    for name, spec, conversion in fields:
        if name not in ("event", "concepts") or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"placeholder {shown[:80]!r} is not allowed; use {{event}} and {{concepts}} only "
                             "(double braces for literal ones)")
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
    AfterValidator(lambda v: _no_control(v, allow_newlines=False, allow_format=False)),
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
    t_min: float | None = Field(None, ge=MIN_TEMPERATURE, le=10)
    t_max: float | None = Field(None, ge=MIN_TEMPERATURE, le=10)
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
    template: Annotated[Text, AfterValidator(_template_check)] = DEFAULT_TEMPLATE
    positions: list[Annotated[int, Field(ge=0, le=1_000_000)]] | None = Field(
        None, description="canvas start of each concept's slot (one per concept); default: spread evenly"
    )
    shuffle: bool = Field(True, description="assign concepts to slots in a seeded random order per sample")
    samples: int = Field(8, ge=1, le=MAX_SAMPLES)
    settings: SettingsIn = Field(default_factory=SettingsIn)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    include_trajectories: bool = Field(False, description="add each sample's per-step raw argmax")


TemplateId = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class StudyRequest(_Strict):
    """A study to run on the served model: ``study`` is what a study file holds (id, title, language,
    concepts, templates, events with group labels; see ``assets/studies/README.md``)."""

    study: dict[str, Any] = Field(description="the study, in the study-file schema (schema version 1)")
    samples: int = Field(12, ge=1, le=MAX_SAMPLES, description="shuffled samples per (event, template) batch")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="base seed; each batch's seed derives from it and the ids")
    templates: list[TemplateId] | None = Field(None, min_length=1, max_length=64,
                                               description="template ids to run (default: all)")
    settings: SettingsIn = Field(default_factory=SettingsIn)


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


# ----------------------------------------------------------------------------------- errors

RunId = Annotated[str, PathParam(description="a run id: 8-64 lowercase hex characters", max_length=64)]
TableName = Annotated[str, PathParam(description="positions, segments, samples or pairs", max_length=32)]


class FieldError(Exception):
    """A request field that passed pydantic but not the model's checks (layout, template)."""

    def __init__(self, loc: Sequence[str | int], msg: str, kind: str = "value_error", **extra):
        self.loc, self.msg, self.kind, self.extra = list(loc), msg, kind, extra
        super().__init__(msg)


def _clean(text) -> str:
    """``text`` as a string that encodes to UTF-8 (a lone surrogate from a ``\\ud800`` escape
    becomes the escape again instead of breaking the response)."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def _safe_error(error: dict) -> dict:
    """A pydantic error as JSON-safe data: type, loc, msg and (short, plain) input only; a NaN, a
    lone surrogate or a huge payload is never echoed back."""
    out = {"type": _clean(error.get("type", "")),
           "loc": [p if isinstance(p, int) else _clean(p)[:200] for p in error.get("loc", ())],
           "msg": _clean(error.get("msg", ""))}
    value = error.get("input")
    if isinstance(value, bool) or value is None:
        out["input"] = value
    elif isinstance(value, int):
        out["input"] = value if abs(value) < 10**30 else _clean(f"{str(value)[:40]}... ({len(str(value))} digits)")
    elif isinstance(value, float):
        out["input"] = _num(value)
    elif isinstance(value, str):
        out["input"] = _clean(value[:200])
    return out


def _body_error(kind: str, msg: str) -> dict:
    return {"detail": [{"type": kind, "loc": ["body"], "msg": msg}]}


class BodyTooLarge(StarletteHTTPException):
    """Raised while a request body is read once it passes :data:`MAX_BODY_BYTES` (an HTTPException,
    so FastAPI passes it on unchanged instead of calling it a parse error)."""

    def __init__(self) -> None:
        super().__init__(413, "Content Too Large")


class BodyLimitMiddleware:
    """Refuse a request body over ``limit`` bytes on ``/api/`` routes with 413 and a JSON detail that
    names the body: at once when ``Content-Length`` says so, else as soon as the streamed (chunked)
    body passes the limit, so a huge body is never buffered or parsed. The Gradio UI (uploads) keeps
    its own limits."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES, prefix: str = "/api/"):
        self.app, self.limit, self.prefix = app, limit, prefix

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            response = JSONResponse(_body_error("body_too_large", f"the request body is larger than {self.limit:,} bytes"),
                                    status_code=413)
            return await response(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge()
            return message

        await self.app(scope, limited_receive, send)


def _parse_failure(err: BaseException | None) -> str:
    """Why a request body could not be parsed at all (FastAPI answers 400 without saying)."""
    if isinstance(err, RecursionError):
        return "the JSON is nested too deeply"
    if isinstance(err, UnicodeDecodeError):
        return "the body is not valid UTF-8"
    if isinstance(err, ValueError) and "digits" in str(err):
        return "the JSON holds an integer with too many digits"
    return "the body could not be parsed as JSON"


def _field_error_body(err: FieldError) -> dict:
    return {"detail": [{"type": err.kind, "loc": err.loc, "msg": err.msg, **err.extra}]}


def _layout_loc(err: LayoutError, concepts: Sequence[str]) -> list:
    index = list(concepts).index(err.concept) if err.concept in concepts else None
    return ["body", "concepts"] + ([index] if index is not None else [])


POST_RESPONSES = {
    400: {"description": "the body is not parseable JSON (too deeply nested, not UTF-8)"},
    413: {"description": f"the body is larger than {MAX_BODY_BYTES:,} bytes"},
    422: {"description": "a bad field (named in detail[*].loc)"},
    503: {"description": "busy: the model runs one job at a time (Retry-After)"},
    507: {"description": "the run store cannot be written (full disk, unwritable folder)"},
}


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
        event_loc = ["body", "event"] if request.event is not None else ["body", "events", index, "event"]
        try:
            prompt, _ = plan_dish(lm, event.dish, request.samples, settings, request.seed)
        except LayoutError as err:
            raise FieldError(_layout_loc(err, request.concepts), err.reason, "layout_error", concept=err.concept) from None
        except ValueError as err:
            loc = ["body", "template"] if str(err).startswith("template") else ["body", "events", index]
            raise FieldError(loc, str(err)) from None
        check_prompt_length(lm, len(prompt.ids), event_loc)
    return events, settings


def max_positions(lm) -> int | None:
    """The positions the model reads (``max_position_embeddings``), when its config says."""
    config = getattr(getattr(lm, "model", None), "config", None) or getattr(lm, "config", None)
    value = getattr(getattr(config, "text_config", None) or config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def check_prompt_length(lm, prompt_tokens: int, loc: list) -> None:
    """A prompt that with the canvas overflows the model's positions is refused (naming ``loc``):
    the model was never trained on such positions, and the attention cost grows with the square."""
    limit = max_positions(lm)
    if limit is not None and prompt_tokens + lm.canvas_length > limit:
        raise FieldError(loc, f"the prompt (template with this event) is {prompt_tokens:,} tokens; with the "
                              f"{lm.canvas_length}-token canvas that is more than the {limit:,} positions this model "
                              "reads; shorten the event or the template", "prompt_too_long")


def prepare_study(request: StudyRequest, lm) -> tuple[Study, SamplerSettings, list[str] | None]:
    """The request's study (validated as a study file, then held to the API's limits), settings and
    template ids, every concept set laid out once (no model work): raises :class:`FieldError`."""
    try:
        study = study_from_dict(request.study, source="request")
    except StudyError as err:
        raise FieldError(["body", "study", _clean(err.entry)], _clean(err.reason)) from None
    try:
        chosen = study.select_templates(request.templates)
    except StudyError as err:
        raise FieldError(["body", "templates"], _clean(err.reason)) from None
    if len(study.concepts) > MAX_CONCEPTS:
        raise FieldError(["body", "study", "concepts"], f"{len(study.concepts)} concepts; at most {MAX_CONCEPTS}")
    checks = [(("concepts", i), c, MAX_CONCEPT_CHARS, _concept_check) for i, c in enumerate(study.concepts)]
    checks += [(("templates", i, "text"), t.text, MAX_TEXT_CHARS, lambda v: _no_control(v, allow_newlines=True))
               for i, t in enumerate(study.templates)]
    for i, e in enumerate(study.events):
        checks.append((("events", i, "text"), e.text, MAX_TEXT_CHARS, lambda v: _no_control(v, allow_newlines=True)))
        checks.append((("events", i, "group"), e.group, MAX_GROUP_CHARS,
                       lambda v: _no_control(v, allow_newlines=False, allow_format=False)))
    for loc, value, limit, check in checks:
        if len(value) > limit:
            raise FieldError(["body", "study", *loc], f"{len(value)} characters; at most {limit}")
        try:
            check(value)
        except ValueError as err:
            raise FieldError(["body", "study", *loc], str(err)) from None
    batches = len(study.events) * len(chosen)
    if batches > MAX_STUDY_BATCHES:
        raise FieldError(["body", "study", "events"], f"{batches} (event, template) batches; at most {MAX_STUDY_BATCHES} "
                         "per request (use `python -m petri study` for large studies)")
    settings = request.settings.apply(lm.default_settings())
    if max_positions(lm) is not None:
        for i, event in enumerate(study.events):
            for template in chosen:
                text = Dish(study.event_concepts(event), event.text, template.text).prompt_text()
                prompt = encode_prompt(lm.tokenizer, text, pin_thought_channel=settings.pin_thought_channel)
                check_prompt_length(lm, len(prompt.ids), ["body", "study", "events", i, "text"])
    try:
        check_layouts(lm, [Dish(study.event_concepts(e), e.text) for e in study.events], settings)
    except LayoutError as err:
        index = study.concepts.index(err.concept) if err.concept in study.concepts else None
        raise FieldError(["body", "study", "concepts"] + ([index] if index is not None else []), err.reason,
                         "layout_error", concept=err.concept) from None
    return study, settings, [t.id for t in chosen] if request.templates is not None else None


def write_run_files(
    run_id: str, trajectories: Sequence[Trajectory], groups: Sequence[str | None], folder
) -> list:
    """The run's tidy CSVs (as ``GET /api/runs/{id}/{table}.csv`` serves them) and ``run.json``
    (model, settings, seeds, prompts, timings, versions) in ``folder``; returns the paths."""
    tables = run_tables(trajectories, groups)
    meta = run_metadata(trajectories, run_id=run_id, groups=list(groups))
    return list(write_tables(tables, folder, meta).values())


def create_api(service: PetriService, app: FastAPI, busy_wait_s: float = 0.0) -> FastAPI:
    """Register the ``/api`` routes on ``app`` (before anything is mounted at ``/``)."""
    lm = service.lm
    app.add_middleware(BodyLimitMiddleware, limit=MAX_BODY_BYTES)

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

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, err: StoreError):
        # A full disk or an unwritable run folder: said plainly (507 Insufficient Storage), never a bare 500.
        log.error("run store failure: %s", err)
        return JSONResponse({"detail": _clean(f"{err}; the run was not stored")}, status_code=507)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException):
        # The two answers FastAPI gives before a body is validated, with the field (the body) named.
        if err.status_code == 413:
            return JSONResponse(_body_error("body_too_large", f"the request body is larger than {MAX_BODY_BYTES:,} bytes"),
                                status_code=413)
        if err.status_code == 400 and err.detail == "There was an error parsing the body":
            return JSONResponse(_body_error("body_unparsable", _parse_failure(err.__cause__)), status_code=400)
        return await http_exception_handler(request, err)

    def model_out(model_id: str | None = None, device: str | None = None) -> ModelOut:
        info = lm.describe()
        if model_id is None or model_id == info["model_id"]:
            return ModelOut(**info)
        return ModelOut(model_id=model_id, device=device or "unknown")

    in_flight = 0  # model jobs of this API running or waiting for the lock (event-loop thread only)

    async def model_job(fn: Callable, *args, **kwargs):
        """``fn`` in a worker thread, or 503 (+ Retry-After) when the model is taken and either this
        server does not wait (``busy_wait_s`` 0) or more than :data:`MAX_QUEUED` API model jobs are
        already in flight (running or waiting)."""
        nonlocal in_flight
        if service.busy and (busy_wait_s <= 0 or in_flight > MAX_QUEUED):
            waiting = f" and {in_flight} API requests are running or waiting for it" if busy_wait_s > 0 else ""
            raise _busy(BusyError(f"a model job is already running{waiting}"))
        in_flight += 1
        try:
            return await run_in_threadpool(functools.partial(fn, *args, **kwargs))
        except BusyError as err:
            raise _busy(err) from None
        finally:
            in_flight -= 1

    @app.get("/api/health", response_model=HealthOut, tags=["api"])
    async def health() -> HealthOut:
        # async: answered on the event loop, so it never waits for a worker thread
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
        responses=POST_RESPONSES,
    )
    async def seed(request: SeedRequest) -> RunOut:
        """Sample every event (one batch of ``samples`` per event) with the concepts pinned."""
        events, settings = prepare_seed(request, lm)
        result = await model_job(run_seed, service, events, request.samples, settings, request.seed, None, busy_wait_s)
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

    @app.post("/api/study", response_model=StudyOut, tags=["api"], responses=POST_RESPONSES)
    async def study(request: StudyRequest) -> StudyOut:
        """Run a study (events × templates × ``samples``) on the served model. Every finished (event,
        template) batch is committed to the run store before the next starts; the run id derives from
        the study, model, settings, samples and seed, so posting the same body again resumes an
        interrupted run (or returns a finished one at once). Tables: ``GET /api/runs/{run_id}``."""
        parsed, settings, templates = prepare_study(request, lm)
        result = await model_job(run_study_job, service, parsed, request.samples, request.seed, settings, templates, busy_wait_s)
        return StudyOut(
            run_id=result.run_id,
            status="done",
            study_id=parsed.id,
            model=model_out(),
            settings=settings.to_dict(),
            samples=result.samples,
            seed=result.seed,
            templates=list(result.template_ids),
            batches=len(result.batches),
            computed=result.computed,
            resumed=result.resumed,
            timings={k: float(v) for k, v in result.timings.items()},
            csv=csv_links(result.run_id),
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
        frame = run_table([t for _, _, t in stored], table, [g for _, g, _ in stored])
        return Response(
            write_csv(frame),
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
        app = gr.mount_gradio_app(app, blocks, path="/", css=UI_CSS, max_file_size=MAX_UPLOAD_BYTES)
    return app
