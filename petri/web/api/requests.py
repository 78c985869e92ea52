"""What a request may ask for: the request models (pydantic v2, unknown fields refused; their
``settings`` made from the families' settings, :mod:`petri.web.api.settings`) and every check that
needs the model (layouts, prompt length, study batches, the settings' checks for its canvas). The API's routes and the UI
both go through these functions, so a request the UI accepts is one the API accepts:

- :func:`prepare_seed`: a :class:`SeedRequest` → its :class:`~petri.core.plan.SeedPlan` (made once, sampled as made);
- :func:`prepare_study`: a :class:`StudyRequest` → the study, settings and template ids;
- :func:`preview_layout`: the anchor layout the seed checks would lay out (the UI's canvas preview).

Each raises :class:`~petri.web.errors.FieldError` naming the field; none does model work.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from petri.core.dish import DEFAULT_TEMPLATE, Dish, LayoutError, concept_token_ids, encode_prompt, even_slots, template_problem
from petri.core.plan import SeedEvent, SeedPlan
from petri.core.settings import FamilySettings
from petri.core.trajectory import AnchorSpan
from petri.engine.seeding import plan_dish, plan_event
from petri.study.execution.runner import check_layouts, plan_cells
from petri.study.plan import StudyPlan
from petri.study.schema import Study, StudyError, study_from_dict
from petri.web import limits
from petri.web.api import examples
from petri.web.api.settings import Settings, SettingsIn, settings_model
from petri.web.errors import FieldError, clean_text
from petri.web.limits import (
    MAX_CONCEPT_CHARS,
    MAX_CONCEPTS,
    MAX_EVENT_TEXT_CHARS,
    MAX_EVENTS,
    MAX_GROUP_CHARS,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_STUDY_BATCHES,
    MIN_CONCEPTS,
)

if TYPE_CHECKING:
    from petri.engine.base import SamplingModel

# ----------------------------------------------------------------------------------- field checks


def no_control(value: str, allow_newlines: bool, allow_format: bool = True) -> str:
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


def concept_check(value: str) -> str:
    """A concept: no control or format characters, no leading or trailing whitespace."""
    no_control(value, allow_newlines=False, allow_format=False)
    if value != value.strip():
        raise ValueError("has leading or trailing whitespace")
    return value


def text_check(value: str) -> str:
    """An event or template text: no control characters except newlines and tabs."""
    return no_control(value, allow_newlines=True)


def group_check(value: str) -> str:
    """A group label: no control or format characters."""
    return no_control(value, allow_newlines=False, allow_format=False)


def template_check(value: str) -> str:
    """The one template rule (:func:`petri.core.dish.template_problem`, as for study files): only the
    bare placeholders ``{event}`` and ``{concepts}``, and ``{event}`` present."""
    problem = template_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Concept = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONCEPT_CHARS), AfterValidator(concept_check)]
Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_EVENT_TEXT_CHARS), AfterValidator(text_check)]
Group = Annotated[str, StringConstraints(min_length=1, max_length=MAX_GROUP_CHARS), AfterValidator(group_check)]
TemplateId = Annotated[str, StringConstraints(min_length=1, max_length=64)]

# ----------------------------------------------------------------------------------- request models


class _Strict(BaseModel):
    """No unknown fields, no NaN or infinity, and no coercion: ``true`` is not a sample count and
    ``"3"`` is not a number."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class EventIn(_Strict):
    """One event the model reads, with an optional group label (e.g. ``benign``)."""

    event: Text
    group: Group | None = None


class SeedRequest(_Strict):
    """A seeding request. Give ``event`` (and optionally ``group``) or ``events``, not both."""

    model_config = ConfigDict(json_schema_extra={"examples": examples.SEED})

    concepts: list[Concept] = Field(min_length=MIN_CONCEPTS, max_length=MAX_CONCEPTS, examples=[["order", "inventory", "person"]])
    event: Text | None = Field(None, examples=["Only 90 units are in stock, but a customer ordered 120."])
    group: Group | None = None
    events: list[EventIn] | None = Field(None, min_length=1, max_length=MAX_EVENTS)
    template: Annotated[Text, AfterValidator(template_check)] = DEFAULT_TEMPLATE
    positions: list[Annotated[int, Field(ge=0, le=1_000_000)]] | None = Field(
        None, description="canvas start of each concept's slot (one per concept); default: spread evenly"
    )
    shuffle: bool = Field(True, description="assign concepts to slots in a seeded random order per sample")
    samples: int = Field(8, ge=1, le=MAX_SAMPLES)
    settings: Settings = Field(default_factory=SettingsIn)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    include_trajectories: bool = Field(False, description="add each sample's per-step raw argmax and canvas")


class StudyRequest(_Strict):
    """A study to run on the served model: ``study`` is what a study file holds (id, title, language,
    concepts, templates, events with group labels; see ``assets/studies/README.md``)."""

    model_config = ConfigDict(json_schema_extra={"examples": examples.STUDY})

    study: dict[str, Any] = Field(description="the study, in the study-file schema (schema version 1)")
    samples: int = Field(12, ge=1, le=MAX_SAMPLES, description="shuffled samples per (event, template) batch")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="base seed; each batch's seed derives from it and the ids")
    templates: list[TemplateId] | None = Field(None, min_length=1, max_length=64,
                                               description="template ids to run (default: all)")
    settings: Settings = Field(default_factory=SettingsIn)


# ----------------------------------------------------------------------------------- model-aware checks


def check_prompt_length(lm: SamplingModel, prompt_tokens: int, loc: list) -> None:
    """A prompt that with the canvas overflows the model's positions is refused (naming ``loc``):
    the model was never trained on such positions, and the attention cost grows with the square."""
    limit = lm.max_positions
    if limit is not None and prompt_tokens > cast(int, lm.max_prompt_length):  # bounded with max_positions
        raise FieldError(loc, f"the prompt (template with this event) is {prompt_tokens:,} tokens; with the "
                              f"{lm.canvas_length}-token canvas that is more than the {limit:,} positions this model "
                              "reads; shorten the event or the template", "prompt_too_long")


def _layout_error(err: LayoutError, concepts: Sequence[str], loc: Sequence[str]) -> FieldError:
    """A layout error as a FieldError at ``loc`` (+ the concept's index where it is one of ``concepts``)."""
    index = list(concepts).index(err.concept) if err.concept in concepts else None
    return FieldError([*loc, *([index] if index is not None else [])], err.reason, "layout_error", concept=err.concept)


def build_events(request: SeedRequest, lm_defaults: FamilySettings,
                 canvas_length: int | None = None) -> tuple[list[SeedEvent], FamilySettings]:
    """The request's dishes (one per event) and settings (``lm_defaults`` with the request's applied,
    checked for a canvas of ``canvas_length``); the fields checked against each other."""
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
    items = ([EventIn(event=request.event, group=request.group)] if request.event is not None
             else cast(list[EventIn], request.events))  # the model requires event or events
    settings = request.settings.apply(lm_defaults, canvas_length)
    events = []
    for item in items:
        try:
            dish = Dish(
                concepts=tuple(request.concepts),
                event=item.event,
                template=request.template,
                positions=tuple(request.positions) if request.positions is not None else None,
                shuffle=request.shuffle,
            )
        except LayoutError as err:
            raise _layout_error(err, request.concepts, ["body", "concepts"]) from None
        except ValueError as err:
            field = str(err).split(":", 1)[0]
            raise FieldError(["body", field if field in SeedRequest.model_fields else "concepts"], str(err)) from None
        events.append(SeedEvent(dish, item.group))
    return events, settings


def prepare_seed(request: SeedRequest, lm: SamplingModel) -> SeedPlan:
    """The request planned (:class:`~petri.core.plan.SeedPlan`: its events and settings, every
    layout and prompt made and checked, no model work) under a new run id: raises
    :class:`FieldError` naming the field. ``POST /api/seed``, ``POST /api/jobs/seed`` and the UI's
    Dish and Compare tabs all go through it, and sample the plan it returns."""
    events, settings = build_events(request, lm.default_settings(), lm.canvas_length)
    cells = len(events) * request.samples * settings.max_denoising_steps * lm.canvas_length
    if request.include_trajectories and cells > limits.MAX_TRAJECTORY_CELLS:
        raise FieldError(
            ["body", "include_trajectories"],
            f"up to {cells:,} argmax values (events × samples × max steps × canvas) is more than one response "
            f"carries ({limits.MAX_TRAJECTORY_CELLS:,}); ask for fewer events or samples, or read the stored run's CSVs",
        )
    planned = []
    for index, event in enumerate(events):
        event_loc = ["body", "event"] if request.event is not None else ["body", "events", index, "event"]
        try:
            planned.append(plan_event(lm, event, request.samples, settings, request.seed))
        except LayoutError as err:
            raise _layout_error(err, request.concepts, ["body", "concepts"]) from None
        except ValueError as err:
            loc: list[str | int] = ["body", "template"] if str(err).startswith("template") else ["body", "events", index]
            raise FieldError(loc, str(err)) from None
        check_prompt_length(lm, len(planned[-1].prompt.ids), event_loc)
    return SeedPlan(tuple(planned), request.samples, settings, request.seed, run_id=uuid.uuid4().hex)


def _check_study_texts(study: Study) -> None:
    """The study file's texts held to the request limits (lengths and characters), naming the entry."""
    checks: list[tuple[tuple[str | int, ...], str, int, Callable[[str], str]]] = [
        (("concepts", i), c, MAX_CONCEPT_CHARS, concept_check) for i, c in enumerate(study.concepts)]
    checks += [(("templates", i, "text"), t.text, MAX_EVENT_TEXT_CHARS, text_check) for i, t in enumerate(study.templates)]
    for i, e in enumerate(study.events):
        checks.append((("events", i, "text"), e.text, MAX_EVENT_TEXT_CHARS, text_check))
        checks.append((("events", i, "group"), e.group, MAX_GROUP_CHARS, group_check))
        checks += [(("events", i, "conditions", cid, "text"), v.text, MAX_EVENT_TEXT_CHARS, text_check)
                   for cid, v in e.variants if v.text is not None]
    for loc, value, limit, check in checks:
        if len(value) > limit:
            raise FieldError(["body", "study", *loc], f"{len(value)} characters; at most {limit}")
        try:
            check(value)
        except ValueError as err:
            raise FieldError(["body", "study", *loc], str(err)) from None


def prepare_study(request: StudyRequest, lm: SamplingModel) -> StudyPlan:
    """The request planned (:class:`~petri.study.plan.StudyPlan`: its study, validated as a study
    file, then held to the web's limits; samples, seed, settings and template ids), every concept
    set laid out and every prompt measured (no model work): raises :class:`FieldError`. ``POST
    /api/study``, ``POST /api/jobs/study`` and the UI's Study tab all go through it, and run the plan
    it returns."""
    try:
        study = study_from_dict(request.study, source="request")
    except StudyError as err:
        raise FieldError(["body", "study", clean_text(err.entry)], clean_text(err.reason)) from None
    try:
        chosen = study.select_templates(request.templates)
    except StudyError as err:
        raise FieldError(["body", "templates"], clean_text(err.reason)) from None
    if len(study.concepts) > MAX_CONCEPTS:
        raise FieldError(["body", "study", "concepts"], f"{len(study.concepts)} concepts; at most {MAX_CONCEPTS}")
    _check_study_texts(study)
    cells = plan_cells(study, chosen)  # (event, template[, condition]) batches with their dishes
    if len(cells) > MAX_STUDY_BATCHES:
        kind = "(event, template, condition)" if study.paired else "(event, template)"
        raise FieldError(["body", "study", "events"], f"{len(cells)} {kind} batches; at most {MAX_STUDY_BATCHES} "
                         "per request (use `python -m petri study` for large studies)")
    settings = request.settings.apply(lm.default_settings(), lm.canvas_length)
    if lm.max_positions is not None:
        index = {e.id: i for i, e in enumerate(study.events)}
        for event, _, condition, dish in cells:
            own = condition and event.variant(condition).text is not None
            loc = ["body", "study", "events", index[event.id], *(("conditions", condition) if own else ()), "text"]
            prompt = encode_prompt(lm.tokenizer, dish.prompt_text(), pin_thought_channel=settings.pin_thought_channel)
            check_prompt_length(lm, len(prompt.ids), loc)
    try:
        check_layouts(lm, [dish for *_, dish in cells], settings)
    except LayoutError as err:
        raise _layout_error(err, study.concepts, ["body", "study", "concepts"]) from None
    try:
        return StudyPlan(study, request.samples, request.seed, settings,
                         tuple(t.id for t in chosen) if request.templates is not None else None)
    except StudyError as err:  # the study's language has no noun analyser here
        raise FieldError(["body", "study", clean_text(err.entry)], clean_text(err.reason)) from None


# ----------------------------------------------------------------------------------- layout preview


@dataclass(frozen=True)
class LayoutPreview:
    """Where a dish's anchors go on the canvas (the UI's canvas strip): ``prefix`` pinned positions
    at the canvas start, ``spans`` one per concept in the order given (empty for a concept that does
    not tokenize), and ``error`` the seed check's refusal ("" when the layout is accepted)."""

    canvas_length: int
    prefix: int
    spans: list[AnchorSpan]
    error: str = ""


def preview_layout(
    lm: SamplingModel, concepts: Sequence[str], positions: Sequence[int] | None = None, pin_thought_channel: bool | None = None
) -> LayoutPreview:
    """The layout :func:`prepare_seed` checks for ``concepts`` at ``positions`` (None: spread evenly),
    unshuffled and without the model: the same :func:`~petri.engine.seeding.plan_dish` call, so the
    preview refuses exactly what a run would. With an error the spans still show where each concept
    that tokenizes was asked to go."""
    # pin_thought_channel: a field of the model made from the families (each has it), not of its base
    settings = settings_model()(pin_thought_channel=pin_thought_channel).apply(lm.default_settings())  # type: ignore[call-arg]
    prefix = len(encode_prompt(lm.tokenizer, "x", pin_thought_channel=settings.pin_thought_channel).canvas_prefix_ids)
    try:
        dish = Dish(tuple(concepts), "x", "{event}", tuple(positions) if positions is not None else None, shuffle=False)
        _, layouts = plan_dish(lm, dish, 1, settings, 0)
    except ValueError as err:  # LayoutError included
        return LayoutPreview(lm.canvas_length, prefix, _requested_spans(lm, concepts, positions, prefix), str(err))
    by_concept = {span.concept: span for span in layouts[0]}
    return LayoutPreview(lm.canvas_length, prefix, [by_concept[c] for c in concepts])


def _requested_spans(lm: SamplingModel, concepts: Sequence[str], positions: Sequence[int] | None, prefix: int) -> list[AnchorSpan]:
    """Each concept that tokenizes at its requested start (or its even slot), for drawing a refused layout."""
    ids = {}
    for c in concepts:
        try:
            ids[c] = concept_token_ids(lm.tokenizer, c)
        except ValueError:
            continue
    if positions is None:
        positions = even_slots([len(ids.get(c, ())) for c in concepts], lm.canvas_length, prefix)
    return [AnchorSpan(c, int(s), ids[c]) for c, s in zip(concepts, positions) if c in ids]
