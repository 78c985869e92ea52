"""``POST /api/probe``'s body (pydantic, at the edge) and how it becomes the probe's dataclasses.

The body is shaped like vLLM's structured-diffusion example server's request (``prompt``, ``frame``,
``questions`` with ``name``, ``alternatives``, ``labels``, ``ask_if``; ``instructions``,
``samples`` as an int or ``"auto"``, ``steps``, ``seed``), so one JSON can be sent to both, and
``order`` and ``min_mass`` (issue 59; their rules are the probe's own, :func:`petri.core.probe.parse_order`,
and ``min_mass``'s bounds are :data:`petri.core.probe.MIN_MASS_LOW` .. ``MIN_MASS_HIGH``). Two
additions make it a labelled set's evaluation (a job): ``items`` (each a prompt with its gold
answers) or ``set`` (the name of a labelled set the project ships, ``assets/probe/``; never a path).

The pydantic models check types and sizes (:mod:`petri.web.limits`); every rule about what a
request means (a label that is not one token, an ``ask_if`` cycle, a slot outside the canvas…) is
the probe's own (:func:`petri.core.probe.validate_request`), whose
:class:`~petri.core.probe.ProbeInputError` the app answers with a 422 naming the field
(:func:`petri.web.errors.field_loc`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from petri.app.probe import EvalSettings
from petri.core.paths import probe_set_path
from petri.core.probe import DEFAULT_MIN_MASS, MIN_MASS_HIGH, MIN_MASS_LOW, ORDER_AS_LISTED, Pin, ProbeRequest, Question, parse_order
from petri.study.probe.probe_eval import EVAL_ORDER
from petri.study.probe.probe_set import LabelledItem, LabelledSet, labelled_set, load_labelled_set
from petri.web.api import examples
from petri.web.api.requests import group_check, text_check
from petri.web.errors import FieldError
from petri.web.limits import (
    MAX_ALTERNATIVES,
    MAX_PROBE_DRAWS,
    MAX_PROBE_ITEMS,
    MAX_PROBE_NAME_CHARS,
    MAX_PROBE_QUESTIONS,
    MAX_PROBE_REPEATS,
    MAX_PROBE_STEPS,
    MAX_PROBE_TEXT_CHARS,
    MAX_SEED,
    MAX_TOP_K,
)

Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROBE_NAME_CHARS), AfterValidator(group_check)]
Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROBE_TEXT_CHARS), AfterValidator(text_check)]
#: the suffixes of a labelled set file (:func:`petri.study.probe.probe_eval.load_labelled_set`)
SET_SUFFIXES = (".jsonl", ".csv")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class QuestionIn(_Strict):
    """One question: the slot it reads (default: its name), its alternatives, optional single-token
    labels (one per alternative; default: automatic), and ``ask_if`` (read only where an earlier
    question's answer matched)."""

    name: Name = Field(examples=["consistent"])
    slot: Name | None = Field(None, description="the frame slot ({{slot}}) it reads; default: its name")
    alternatives: list[Name] = Field(min_length=1, max_length=MAX_ALTERNATIVES, examples=[["yes", "no"]])
    labels: list[Name] | None = Field(None, max_length=MAX_ALTERNATIVES)
    ask_if: dict[Name, Name] | None = Field(None, max_length=MAX_PROBE_QUESTIONS)
    text: Text | None = Field(None, description="its wording in the prompt's listing; default: its name")


class PinIn(_Strict):
    """Text pinned at canvas position ``at`` besides the frame (as a concept is pinned)."""

    text: Text
    at: int = Field(ge=0, le=1_000_000)


class ItemIn(_Strict):
    """One item of an inline labelled set, as a line of a JSONL set file
    (:mod:`petri.study.probe.probe_set`): its input, optionally its own frame, its gold answers."""

    id: Name | None = Field(None, description="default: its index")
    prompt: Text
    frame: Text | None = None
    gold: dict[Name, Name] = Field(default_factory=dict, max_length=MAX_PROBE_QUESTIONS)


Draws = Annotated[int, Field(ge=1, le=MAX_PROBE_DRAWS)]


class ProbeIn(_Strict):
    """A slot read (``prompt``, ``frame``, ``questions``: answered at once) or a labelled set's
    evaluation (``frame``, ``questions`` and ``items``, or a shipped ``set``: a job, 202)."""

    model_config = ConfigDict(json_schema_extra={"examples": examples.PROBE})

    prompt: Text | None = Field(None, examples=["Only 90 units are in stock, but a customer ordered 120."])
    frame: Text | None = Field(None, examples=["Is this consistent? {{consistent}}"],
                               description="the canvas text: slots written {{name}}, the rest pinned")
    questions: list[QuestionIn] | None = Field(None, min_length=1, max_length=MAX_PROBE_QUESTIONS)
    instructions: Text | None = Field(None, description="one line put before the prompt")
    samples: Draws | Literal["auto"] = Field(1, description='noise draws averaged; "auto": 1, then 4 where the '
                                                            "entropy over the alternatives exceeds 0.1")
    steps: int = Field(1, ge=1, le=MAX_PROBE_STEPS, description="denoising steps read")
    seed: int = Field(0, ge=0, le=MAX_SEED)
    top_k: int = Field(5, ge=1, le=MAX_TOP_K)
    pins: list[PinIn] | None = Field(None, max_length=MAX_PROBE_QUESTIONS, description="further text pinned at "
                                     "explicit canvas positions")
    items: list[ItemIn] | None = Field(None, min_length=1, max_length=MAX_PROBE_ITEMS,
                                       description="a labelled set to evaluate (a job)")
    set: Name | None = Field(None, description="the name of a shipped labelled set to evaluate (a job)")
    repeats: int = Field(1, ge=1, le=MAX_PROBE_REPEATS, description="an evaluation reads the set this many times")
    order: str | None = Field(None, max_length=MAX_PROBE_NAME_CHARS, examples=["cyclic"],
                              description='how the alternatives are listed: "as_listed" (a read\'s default), '
                              '"cyclic" (every rotation, each read with the same noise; an evaluation\'s default) '
                              'or "permutations:N" (N seeded random orders, N 2-32); an order-averaged read '
                              "averages each alternative's probability over the orders")
    min_mass: float = Field(DEFAULT_MIN_MASS, ge=MIN_MASS_LOW, le=MIN_MASS_HIGH,
                            description="a read with less of the model's probability than this on its labels "
                            "answers null (no answer)")

    @property
    def is_evaluation(self) -> bool:
        return self.items is not None or self.set is not None


def _require(body: ProbeIn, present: tuple[str, ...], absent: tuple[str, ...], mode: str) -> None:
    for name in present:
        if getattr(body, name) is None:
            raise FieldError(["body", name], f"{mode} needs {name}", kind="missing")
    for name in absent:
        if getattr(body, name) is not None:
            raise FieldError(["body", name], f"{mode} takes no {name}", kind="extra_forbidden")


def _questions(body: ProbeIn) -> tuple[Question, ...]:
    return tuple(Question(name=q.name, slot=q.slot or q.name, alternatives=tuple(q.alternatives),
                          labels=None if q.labels is None else tuple(q.labels),
                          ask_if=None if q.ask_if is None else dict(q.ask_if), text=q.text)
                 for q in body.questions or ())


def prepare_probe(body: ProbeIn) -> ProbeRequest:
    """The :class:`ProbeRequest` of a read's body (``prompt``, ``frame`` and ``questions`` needed;
    ``items``, ``set`` and ``repeats`` refused, naming the field): the body's fields as they are,
    ``slot`` defaulting to the question's name and ``order`` to as listed (its form checked here,
    :func:`petri.core.probe.parse_order`); what they mean on a model is checked when it is read."""
    _require(body, ("prompt", "frame", "questions"), ("items", "set"), "a read")
    if body.repeats != 1:
        raise FieldError(["body", "repeats"], "a read is read once; repeats belong to an evaluation (items or set)")
    order = body.order or ORDER_AS_LISTED
    parse_order(order)
    # _require: prompt and frame given
    return ProbeRequest(prompt=cast(str, body.prompt), frame=cast(str, body.frame), questions=_questions(body),
                        instructions=body.instructions, samples=body.samples, steps=body.steps, seed=body.seed,
                        top_k=body.top_k, pins=tuple(Pin(p.text, p.at) for p in body.pins or ()), order=order,
                        min_mass=float(body.min_mass))


def read_request(payload: Mapping) -> ProbeRequest:
    """A read's request from its JSON shape, checked once, as ``POST /api/probe`` checks it: the
    constructor the Probe tab and ``petri probe --request`` share. Raises pydantic's
    ``ValidationError``, a :class:`FieldError` or a :class:`~petri.core.probe.ProbeInputError`,
    each naming the field (:func:`petri.web.errors.request_error_message` words the first two)."""
    return prepare_probe(ProbeIn.model_validate(payload))


def shipped_sets() -> dict[str, Path]:
    """The labelled sets the project ships (beside :func:`petri.core.paths.probe_set_path`:
    ``assets/probe/*.jsonl|csv``) by name (the file's stem)."""
    folder = probe_set_path().parent
    files = sorted(p for p in folder.glob("*") if p.suffix in SET_SUFFIXES) if folder.is_dir() else []
    return {p.stem: p for p in files}


def prepare_evaluation(body: ProbeIn) -> tuple[LabelledSet, EvalSettings]:
    """The labelled set (inline ``items`` with ``frame`` and ``questions``, or a shipped ``set`` by
    name; never a path) and how to read it. Sizes over the limits and an unknown set are refused
    naming the field; the set's meaning is checked by the service before it is queued."""
    settings = EvalSettings(samples=body.samples, steps=body.steps, seed=body.seed, repeats=body.repeats,
                            order=body.order or EVAL_ORDER, min_mass=body.min_mass)
    if body.set is not None:
        _require(body, (), ("prompt", "items", "frame", "questions", "instructions", "pins"), "a shipped set")
        sets = shipped_sets()
        if body.set not in sets:
            raise FieldError(["body", "set"], f"no shipped labelled set is called {body.set!r}; the shipped ones: "
                             f"{', '.join(sets) or 'none'}")
        return load_labelled_set(sets[body.set]), settings
    _require(body, ("frame", "questions", "items"), ("prompt", "pins"), "a labelled set")
    items = [LabelledItem(str(i) if item.id is None else item.id, item.prompt, item.frame, dict(item.gold))
             for i, item in enumerate(cast(list[ItemIn], body.items))]  # _require: given
    return labelled_set("inline", _questions(body), cast(str, body.frame), body.instructions, items), settings  # _require: given
