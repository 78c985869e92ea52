"""The probe's request: a prompt, an answer frame with slots, and the questions read at the slots.

A probe (issue 50; the method of vLLM's structured-diffusion example server) writes an answer
*frame* on the canvas, pins it, leaves one canvas position per *slot* free, runs k denoising steps
from noise and reads the distribution at each slot over the label tokens of its question's
alternatives. This module holds the request (dataclasses, the JSON shape, every refusal) and how
it lands on the canvas (:func:`layout_frame`); no torch. The engine's read is
:func:`petri.engine.probe.read_slots`.

How a request lands on the canvas (docs/probe.md):

- The frame is text with slots written ``{{name}}``. Each slot is **one** canvas position. The text
  between slots is tokenized piece by piece, as written, and pinned. A slot preceded by a space
  takes that space into its label token (``"Answer: {{a}}"`` reads ``" A"``, ``" B"``, the tokens
  a tokenizer writes mid-sentence); otherwise the bare label (``"A"``).
- The frame starts after the tokens pinned at the canvas start (the thought block); positions after
  the frame are free, as in a seed (noise in the uniform family, the mask token in the masked one).
- ``pins`` pin further text at explicit canvas positions (concepts, tokenized mid-sentence).
- The prompt the model reads is ``instructions`` (one line, if any), the ``prompt``, then one line
  per question listing its alternatives with their labels: ``"<text>: A) yes  B) no"``
  (:func:`render_prompt`), so the model can see which label stands for which alternative.
- ``order`` (issue 59): ``"as_listed"`` reads the alternatives in the order given; ``"cyclic"``
  reads every cyclic rotation (the labels stay in place, so label A stands for another alternative
  in each); ``"permutations:N"`` reads N seeded random orders (:func:`listing_orders`). An
  order-averaged read averages each *alternative's* probability over the orders.
- ``min_mass``: a read whose probability mass on its label tokens (for an order-averaged read, the
  mean over the orders) is below it answers ``None`` ("no answer").
"""

from __future__ import annotations

import math
import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from petri.core.settings import MAX_SEED

#: Limits of one request and of a labelled set (the HTTP layer applies the same ones; the seed's,
#: 0..MAX_SEED, is every request's: :data:`petri.core.settings.MAX_SEED`). ``MAX_TEXT_CHARS``: the
#: prompt, the frame, the instructions, a question's text, a pin's and an item's prompt.
MAX_QUESTIONS = 16
MAX_ALTERNATIVES = 200
MAX_ITEMS = 2000
MAX_SAMPLES = 32
MAX_STEPS = 64
MAX_TOP_K = 50
MAX_TEXT_CHARS = 20_000
#: ``order``: how a read lists the alternatives (docs/probe.md). ``"permutations:N"`` takes N in
#: MIN_ORDERS..MAX_ORDERS; ``"cyclic"`` reads as many orders as its largest question has
#: alternatives, at most MAX_ORDERS.
ORDER_AS_LISTED, ORDER_CYCLIC, ORDER_PERMUTATIONS = "as_listed", "cyclic", "permutations"
MIN_ORDERS, MAX_ORDERS = 2, 32
#: ``min_mass``: its bounds and default (a read below it on its labels answers None)
MIN_MASS_LOW, MIN_MASS_HIGH, DEFAULT_MIN_MASS = 0.0, 1.0, 0.5
#: ``samples="auto"``: one read, then this many draws where the entropy exceeds the threshold.
AUTO_DRAWS = 4
AUTO_ENTROPY = 0.1

_LETTERS = tuple(string.ascii_uppercase) + tuple(string.ascii_lowercase) + tuple(string.digits)
#: Candidate labels in order: A..Z, a..z, 0..9, then two-letter ones AA..ZZ; automatic labels are
#: the first ones the tokenizer writes as one token at the slot (:func:`single_token_labels`).
LABEL_POOL = _LETTERS + tuple(a + b for a in string.ascii_uppercase for b in string.ascii_uppercase)

SLOT_PATTERN = re.compile(r"\{\{\s*([A-Za-z0-9_\-]*)\s*\}\}")
_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


class ProbeInputError(ValueError):
    """A request the probe refuses; ``field`` names the request field (``"questions[2].labels"``,
    ``"frame"``, ``"pins[0]"``), ``str(error)`` says why. The HTTP edge answers 422 naming ``field``."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class Question:
    """One question read at one slot: ``alternatives`` (the answers), ``labels`` (one single-token
    label per alternative; ``None``: automatic), ``ask_if`` ({earlier question: alternative}: read
    only where that answer matched; ``None``: always), ``text`` (its wording in the prompt's
    listing; ``None``: the name)."""

    name: str
    slot: str
    alternatives: tuple[str, ...]
    labels: tuple[str, ...] | None = None
    ask_if: dict[str, str] | None = None
    text: str | None = None


@dataclass(frozen=True)
class Pin:
    """Text pinned at canvas position ``at`` (tokenized mid-sentence, as concepts are)."""

    text: str
    at: int


@dataclass(frozen=True)
class ProbeRequest:
    """One probe: see the module docstring for how it lands on the canvas."""

    prompt: str
    frame: str
    questions: tuple[Question, ...]
    instructions: str | None = None
    samples: int | Literal["auto"] = 1
    steps: int = 1
    seed: int = 0
    top_k: int = 5
    pins: tuple[Pin, ...] = field(default=())
    order: str = ORDER_AS_LISTED
    min_mass: float = DEFAULT_MIN_MASS


def _text(payload: Mapping, key: str, where: str, *, required: bool = True, default: Any = None) -> Any:
    value = payload.get(key, default)
    if value is None:
        if required:
            raise ProbeInputError(where, "is required")
        return None
    if not isinstance(value, str):
        raise ProbeInputError(where, f"must be a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise ProbeInputError(where, f"is {len(value)} characters; at most {MAX_TEXT_CHARS}")
    return value


def _int(payload: Mapping, key: str, default: int, low: int, high: int) -> int:
    value = payload.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProbeInputError(key, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ProbeInputError(key, f"must be between {low} and {high}, got {value}")
    return value


def parse_order(order: Any) -> tuple[str, int]:
    """``order`` as (kind, N): ``("as_listed", 1)``, ``("cyclic", 0)`` (N follows the questions) or
    ``("permutations", N)`` with N in MIN_ORDERS..MAX_ORDERS. Raises :class:`ProbeInputError`
    naming ``order``."""
    if order in (ORDER_AS_LISTED, ORDER_CYCLIC):
        return order, 1 if order == ORDER_AS_LISTED else 0
    if isinstance(order, str) and order.startswith(ORDER_PERMUTATIONS + ":"):
        count = order.split(":", 1)[1]
        if not count.isdigit() or not MIN_ORDERS <= int(count) <= MAX_ORDERS:
            raise ProbeInputError("order", f"permutations:N takes N from {MIN_ORDERS} to {MAX_ORDERS}, got {count!r}")
        return ORDER_PERMUTATIONS, int(count)
    raise ProbeInputError("order", f'must be "{ORDER_AS_LISTED}", "{ORDER_CYCLIC}" or "{ORDER_PERMUTATIONS}:N" '
                          f"(N {MIN_ORDERS}-{MAX_ORDERS}), got {order!r}")


def check_min_mass(value: Any) -> float:
    """``min_mass`` as a float in [MIN_MASS_LOW, MIN_MASS_HIGH]; raises :class:`ProbeInputError` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not MIN_MASS_LOW <= value <= MIN_MASS_HIGH:
        raise ProbeInputError("min_mass", f"must be a number from {MIN_MASS_LOW:g} to {MIN_MASS_HIGH:g}, got {value!r}")
    return float(value)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ProbeInputError(where, "must be a list of strings")
    return tuple(value)


def question_from_dict(payload: Any, index: int) -> Question:
    """One entry of ``questions`` (``slot`` defaults to the name; ``choices`` is read as
    ``alternatives``)."""
    where = f"questions[{index}]"
    if not isinstance(payload, Mapping):
        raise ProbeInputError(where, "must be an object")
    unknown = set(payload) - {"name", "slot", "alternatives", "choices", "labels", "ask_if", "text"}
    if unknown:
        raise ProbeInputError(f"{where}.{sorted(unknown)[0]}", "unknown field")
    name = _text(payload, "name", f"{where}.name")
    alternatives = payload.get("alternatives", payload.get("choices"))
    if alternatives is None:
        raise ProbeInputError(f"{where}.alternatives", "is required")
    labels = payload.get("labels")
    ask_if = payload.get("ask_if")
    if ask_if is not None and (not isinstance(ask_if, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in ask_if.items())):
        raise ProbeInputError(f"{where}.ask_if", 'must map question names to alternatives, e.g. {"consistent": "no"}')
    return Question(
        name=name, slot=_text(payload, "slot", f"{where}.slot", default=name),
        alternatives=_strings(alternatives, f"{where}.alternatives"),
        labels=None if labels is None else _strings(labels, f"{where}.labels"),
        ask_if=None if ask_if is None else dict(ask_if), text=_text(payload, "text", f"{where}.text", required=False))


def request_from_dict(payload: Any) -> ProbeRequest:
    """The request of the example server's JSON shape: ``prompt``, ``frame``, ``questions`` (each
    ``name``, ``alternatives``, optional ``slot``, ``labels``, ``ask_if``, ``text``),
    ``instructions``, ``samples`` (int or ``"auto"``), ``steps``, ``seed``, ``top_k``, ``pins``
    (``[{"text", "at"}]``), ``order`` (:func:`parse_order`), ``min_mass`` (:func:`check_min_mass`). Structure only;
    :func:`validate_request` checks it against a model. Raises :class:`ProbeInputError`."""
    if not isinstance(payload, Mapping):
        raise ProbeInputError("request", "must be a JSON object")
    unknown = set(payload) - {"prompt", "frame", "questions", "instructions", "samples", "steps", "seed", "top_k",
                              "pins", "order", "min_mass"}
    if unknown:
        raise ProbeInputError(sorted(unknown)[0], "unknown field")
    prompt, frame = _text(payload, "prompt", "prompt"), _text(payload, "frame", "frame")
    questions = payload.get("questions")
    if not isinstance(questions, (list, tuple)) or not questions:
        raise ProbeInputError("questions", "at least one question is needed")
    if len(questions) > MAX_QUESTIONS:
        raise ProbeInputError("questions", f"{len(questions)} questions; at most {MAX_QUESTIONS}")
    samples = payload.get("samples", 1)
    if samples != "auto":
        samples = _int(payload, "samples", 1, 1, MAX_SAMPLES)
    pins = payload.get("pins") or []
    if not isinstance(pins, (list, tuple)):
        raise ProbeInputError("pins", "must be a list of {text, at}")
    parsed_pins = []
    for i, pin in enumerate(pins):
        if not isinstance(pin, Mapping) or not isinstance(pin.get("at"), int) or isinstance(pin.get("at"), bool):
            raise ProbeInputError(f"pins[{i}]", "must be an object with text (string) and at (integer)")
        parsed_pins.append(Pin(_text(pin, "text", f"pins[{i}].text"), int(pin["at"])))
    order = payload.get("order", ORDER_AS_LISTED)
    parse_order(order)
    return ProbeRequest(
        prompt=prompt, frame=frame,
        questions=tuple(question_from_dict(q, i) for i, q in enumerate(questions)),
        instructions=_text(payload, "instructions", "instructions", required=False), samples=samples,
        steps=_int(payload, "steps", 1, 1, MAX_STEPS), seed=_int(payload, "seed", 0, 0, MAX_SEED),
        top_k=_int(payload, "top_k", 5, 1, MAX_TOP_K), pins=tuple(parsed_pins),
        order=order,
        min_mass=check_min_mass(payload.get("min_mass", DEFAULT_MIN_MASS)))


def request_to_dict(request: ProbeRequest) -> dict:
    """The JSON shape :func:`request_from_dict` reads (round-trips)."""
    out: dict[str, Any] = {"prompt": request.prompt, "frame": request.frame, "questions": []}
    for q in request.questions:
        entry: dict[str, Any] = {"name": q.name, "slot": q.slot, "alternatives": list(q.alternatives)}
        if q.labels is not None:
            entry["labels"] = list(q.labels)
        if q.ask_if is not None:
            entry["ask_if"] = dict(q.ask_if)
        if q.text is not None:
            entry["text"] = q.text
        out["questions"].append(entry)
    if request.instructions is not None:
        out["instructions"] = request.instructions
    out.update(samples=request.samples, steps=request.steps, seed=request.seed, top_k=request.top_k,
               order=request.order, min_mass=request.min_mass)
    if request.pins:
        out["pins"] = [{"text": p.text, "at": p.at} for p in request.pins]
    return out


def question_order(questions: Sequence[Question]) -> list[list[int]]:
    """The questions' indices in reading levels: level 0 has no ``ask_if``; a question comes one
    level after the latest question its ``ask_if`` names. Raises :class:`ProbeInputError` for an
    ``ask_if`` naming an unknown question (or itself), an alternative that question lacks, or a cycle."""
    index = {q.name: i for i, q in enumerate(questions)}
    for i, q in enumerate(questions):
        for name, wanted in (q.ask_if or {}).items():
            if name not in index or name == q.name:
                raise ProbeInputError(f"questions[{i}].ask_if", f"names {name!r}, which is not another question of "
                                      f"this request ({', '.join(index)})")
            if wanted not in questions[index[name]].alternatives:
                raise ProbeInputError(f"questions[{i}].ask_if", f"{wanted!r} is not an alternative of {name!r} "
                                      f"({', '.join(questions[index[name]].alternatives)})")
    level: dict[int, int] = {}

    def visit(i: int, path: tuple[int, ...]) -> int:
        if i in path:
            cycle = " → ".join(questions[j].name for j in (*path[path.index(i):], i))
            raise ProbeInputError(f"questions[{i}].ask_if", f"forms a cycle: {cycle}")
        if i not in level:
            parents = [visit(index[n], (*path, i)) for n in (questions[i].ask_if or {})]
            level[i] = 1 + max(parents) if parents else 0
        return level[i]

    for i in range(len(questions)):
        visit(i, ())
    return [[i for i in range(len(questions)) if level[i] == d] for d in range(max(level.values()) + 1)]


def split_frame(frame: str) -> list[tuple[str, str]]:
    """The frame as pieces in order: ``("text", s)`` and ``("slot", name)``."""
    pieces, last = [], 0
    for match in SLOT_PATTERN.finditer(frame):
        if match.start() > last:
            pieces.append(("text", frame[last:match.start()]))
        pieces.append(("slot", match.group(1)))
        last = match.end()
    if last < len(frame):
        pieces.append(("text", frame[last:]))
    return pieces


def single_token_labels(encode_single: Callable[[str], int | None], space: bool) -> tuple[str, ...]:
    """The members of :data:`LABEL_POOL` the tokenizer writes as one token (with a leading space
    where the slot takes one), in order."""
    return tuple(label for label in LABEL_POOL if encode_single((" " if space else "") + label) is not None)


@dataclass(frozen=True)
class FrameLayout:
    """A request on one model's canvas: ``pinned_ids`` (L,) int token ids (0 where free),
    ``pinned`` (L,) bool, ``slots`` {slot name: canvas position}, and per question (in request
    order) its ``labels`` (texts, as listed in the prompt) and ``label_ids`` (token ids read at
    the slot)."""

    pinned_ids: tuple[int, ...]
    pinned: tuple[bool, ...]
    slots: dict[str, int]
    labels: tuple[tuple[str, ...], ...]
    label_ids: tuple[tuple[int, ...], ...]
    levels: tuple[tuple[int, ...], ...]


def _check_questions(request: ProbeRequest, slot_names: list[str]) -> None:
    names: set[str] = set()
    for i, q in enumerate(request.questions):
        where = f"questions[{i}]"
        if not _NAME.match(q.name or ""):
            raise ProbeInputError(f"{where}.name", "an empty question: give a name of letters, digits, _ or -")
        if q.name in names:
            raise ProbeInputError(f"{where}.name", f"duplicate question name {q.name!r}")
        names.add(q.name)
        if len(q.alternatives) < 2 or any(not a.strip() for a in q.alternatives):
            raise ProbeInputError(f"{where}.alternatives", "an empty question: give at least two non-blank alternatives")
        if len(set(q.alternatives)) != len(q.alternatives):
            raise ProbeInputError(f"{where}.alternatives", "alternatives repeat")
        if len(q.alternatives) > MAX_ALTERNATIVES:
            raise ProbeInputError(f"{where}.alternatives", f"{len(q.alternatives)} alternatives; at most {MAX_ALTERNATIVES}")
        if q.labels is not None and (len(q.labels) != len(q.alternatives) or len(set(q.labels)) != len(q.labels)):
            raise ProbeInputError(f"{where}.labels", f"give one distinct label per alternative "
                                  f"({len(q.alternatives)}), got {len(q.labels)}")
        if q.slot not in slot_names:
            raise ProbeInputError(f"{where}.slot", f"slot {q.slot!r} is not in the frame (write it as {{{{{q.slot}}}}})")
    read = {q.slot for q in request.questions}
    for name in slot_names:
        if name not in read:
            raise ProbeInputError("frame", f"slot {{{{{name}}}}} is read by no question; add a question with slot "
                                  f"{name!r} or take the slot out of the frame")


def layout_frame(request: ProbeRequest, *, canvas_length: int, encode: Callable[[str], Sequence[int]],
                 encode_single: Callable[[str], int | None], prefix_ids: Sequence[int] = ()) -> FrameLayout:
    """Lay ``request`` out on a canvas of ``canvas_length`` after ``prefix_ids`` (the pinned thought
    block): ``encode(text)`` → token ids without special tokens, ``encode_single(text)`` → its one
    token id or ``None``. Raises :class:`ProbeInputError` naming the field for every refusal."""
    if not request.questions:
        raise ProbeInputError("questions", "at least one question is needed")
    if not request.prompt.strip():
        raise ProbeInputError("prompt", "is empty")
    pieces = split_frame(request.frame)
    slot_names = [name for kind, name in pieces if kind == "slot"]
    for name in slot_names:
        if not _NAME.match(name):
            raise ProbeInputError("frame", f"slot {{{{{name}}}}}: a slot name is letters, digits, _ or -")
    if len(set(slot_names)) != len(slot_names):
        raise ProbeInputError("frame", "a slot appears twice in the frame")
    if not slot_names:
        raise ProbeInputError("frame", "has no slot; write one as {{name}}")
    _check_questions(request, slot_names)
    levels = question_order(request.questions)
    listing_orders(request)  # the order and min_mass, for a request not built by request_from_dict
    check_min_mass(request.min_mass)
    ids: list[int | None] = list(prefix_ids)
    slots: dict[str, int] = {}
    spaced: dict[str, bool] = {}
    for n, (kind, value) in enumerate(pieces):
        if kind == "slot":
            slots[value] = len(ids)
            ids.append(None)
            continue
        following_slot = n + 1 < len(pieces) and pieces[n + 1][0] == "slot"
        if following_slot and value.endswith(" "):
            spaced[pieces[n + 1][1]] = True
            value = value[:-1]
        ids.extend(int(t) for t in encode(value))
    text_tokens = sum(t is not None for t in ids)
    if len(ids) > canvas_length and text_tokens <= canvas_length:
        name, at = max(slots.items(), key=lambda item: item[1])
        i = next((n for n, q in enumerate(request.questions) if q.slot == name), 0)
        raise ProbeInputError(f"questions[{i}].slot", f"slot {{{{{name}}}}} falls at canvas position {at}, outside "
                              f"the canvas 0..{canvas_length - 1}")
    if len(ids) > canvas_length:
        raise ProbeInputError("frame", f"takes {len(ids) - len(prefix_ids)} canvas positions after the "
                              f"{len(prefix_ids)} pinned at the start; the canvas has {canvas_length}")
    pinned = [t is not None for t in ids] + [False] * (canvas_length - len(ids))
    pinned_ids = [t or 0 for t in ids] + [0] * (canvas_length - len(ids))
    for i, pin in enumerate(request.pins):
        tokens = list(encode(" " + pin.text.strip()))
        if not pin.text.strip() or not tokens:
            raise ProbeInputError(f"pins[{i}].text", "is empty")
        if pin.at < 0 or pin.at + len(tokens) > canvas_length:
            raise ProbeInputError(f"pins[{i}]", f"positions {pin.at}..{pin.at + len(tokens) - 1} lie outside the "
                                  f"canvas 0..{canvas_length - 1}")
        for p in range(pin.at, pin.at + len(tokens)):
            if p in slots.values():
                slot = next(name for name, at in slots.items() if at == p)
                raise ProbeInputError(f"pins[{i}]", f"overlaps slot {{{{{slot}}}}} at position {p}")
            if pinned[p]:
                raise ProbeInputError(f"pins[{i}]", f"overlaps a pinned span (the frame or another pin) at position {p}")
        for p, t in zip(range(pin.at, pin.at + len(tokens)), tokens):
            pinned[p], pinned_ids[p] = True, int(t)
    labels, label_ids = [], []
    for i, q in enumerate(request.questions):
        space = spaced.get(q.slot, False)
        chosen = q.labels
        if chosen is None:
            pool = single_token_labels(encode_single, space)
            chosen = pool[:len(q.alternatives)]
            if len(pool) < len(q.alternatives):
                have = len(pool)
                raise ProbeInputError(f"questions[{i}].alternatives", f"question {q.name!r} has {len(q.alternatives)} "
                                      f"alternatives but this tokenizer has only {have} single-token labels")
        tokens = []
        for label in chosen:
            token = encode_single((" " if space else "") + label)
            if token is None or not label.strip():
                raise ProbeInputError(f"questions[{i}].labels", f"label {label!r} of question {q.name!r} is not one "
                                      "token for this tokenizer")
            tokens.append(int(token))
        if len(set(tokens)) != len(tokens):
            raise ProbeInputError(f"questions[{i}].labels", f"two labels of question {q.name!r} are the same token")
        labels.append(tuple(chosen))
        label_ids.append(tuple(tokens))
    return FrameLayout(tuple(pinned_ids), tuple(pinned), slots, tuple(labels), tuple(label_ids),
                       tuple(tuple(level) for level in levels))


def validate_request(request: ProbeRequest, *, canvas_length: int, encode_single: Callable[[str], int | None],
                     encode: Callable[[str], Sequence[int]] | None = None, prefix_ids: Sequence[int] = ()) -> None:
    """Every refusal of issue 50's "Bad input" as a :class:`ProbeInputError` naming the field (see
    :func:`layout_frame`). Without ``encode`` the frame's text counts as no tokens (only its slots
    are measured against the canvas): pass the tokenizer's ``encode`` to check the frame's length."""
    layout_frame(request, canvas_length=canvas_length, encode=encode or (lambda text: []),
                 encode_single=encode_single, prefix_ids=prefix_ids)


def render_prompt(request: ProbeRequest, labels: Sequence[Sequence[str]]) -> str:
    """The text the model reads: ``instructions`` (if any) on its own line, the ``prompt``, then one
    line per question, ``"<text or name>: A) yes  B) no"`` (labels and alternatives joined by ``) ``,
    entries by two spaces)."""
    lines = [request.instructions.strip()] if request.instructions and request.instructions.strip() else []
    lines.append(request.prompt)
    for q, question_labels in zip(request.questions, labels):
        listing = "  ".join(f"{label}) {alt}" for label, alt in zip(question_labels, q.alternatives))
        lines.append(f"{q.text or q.name}: {listing}")
    return "\n".join(lines)


@dataclass(frozen=True)
class ListingOrder:
    """One order in which a read lists the alternatives: ``listing[i][j]`` is the index (in the
    request) of the alternative question i lists at position j, labelled by its j-th label;
    ``counts[i]``: whether this order enters question i's average (a cyclic read of questions of
    different sizes reads max(n) rotations, and question i averages its first n_i)."""

    listing: tuple[tuple[int, ...], ...]
    counts: tuple[bool, ...]


def listing_orders(request: ProbeRequest) -> tuple[ListingOrder, ...]:
    """The orders ``request.order`` reads, the first as listed for ``"as_listed"`` and
    ``"cyclic"``: cyclic rotation r lists alternative (j + r) mod n at position j; permutation k is
    drawn by ``random.Random(request.seed)`` (the same request draws the same orders). Raises
    :class:`ProbeInputError` naming ``order`` (an unknown order, N out of range, a cyclic read of a
    question with more than MAX_ORDERS alternatives)."""
    kind, count = parse_order(request.order)
    sizes = [len(q.alternatives) for q in request.questions]
    if kind == ORDER_AS_LISTED:
        return (ListingOrder(tuple(tuple(range(n)) for n in sizes), tuple(True for _ in sizes)),)
    if kind == ORDER_CYCLIC:
        if max(sizes) > MAX_ORDERS:
            raise ProbeInputError("order", f"a cyclic read reads one order per alternative, at most {MAX_ORDERS}; "
                                  f"a question has {max(sizes)}: use permutations:N")
        return tuple(ListingOrder(tuple(tuple((j + r) % n for j in range(n)) for n in sizes),
                                  tuple(r < n for n in sizes)) for r in range(max(sizes)))
    rng = random.Random(request.seed)
    return tuple(ListingOrder(tuple(tuple(rng.sample(range(n), n)) for n in sizes), tuple(True for _ in sizes))
                 for _ in range(count))


def listed_request(request: ProbeRequest, order: ListingOrder) -> ProbeRequest:
    """``request`` with each question's alternatives in ``order`` (labels stay in place: the j-th
    label names whatever is listed j-th), read as listed."""
    questions = tuple(replace(q, alternatives=tuple(q.alternatives[k] for k in listing))
                      for q, listing in zip(request.questions, order.listing))
    return replace(request, questions=questions, order=ORDER_AS_LISTED)
