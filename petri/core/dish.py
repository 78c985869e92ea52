"""The dish: the prompt and, per sample, where each concept is pinned on the canvas.

Concepts are tokenized as they appear mid-sentence (with a leading space), so an anchor holds the
same tokens the model would write for that word inside a sentence; an anchor may span several
tokens. Slots are spread evenly over the canvas by default or given explicitly; which concept takes
which slot is shuffled per sample by a seeded RNG, so that every pair of concepts becomes adjacent
somewhere across samples.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from petri.core.trajectory import AnchorSpan

if TYPE_CHECKING:  # a type hint only: the numpy layer never imports transformers
    from transformers import PreTrainedTokenizerBase

#: The instruction-tuned DiffusionGemma opens its answer with this (empty) thought block.
THOUGHT_CHANNEL = "<|channel>thought\n<channel|>"

DEFAULT_TEMPLATE = "Event: {event}\nDescribe how {concepts} relate in this event."


class LayoutError(ValueError):
    """A concept cannot be placed; ``concept`` names it and ``reason`` says why."""

    def __init__(self, concept: str, reason: str):
        self.concept = concept
        self.reason = reason
        super().__init__(f"concept {concept!r}: {reason}")


@dataclass(frozen=True)
class Dish:
    """What the user sets up: concepts to pin, the event the model reads, a prompt template.

    ``template`` may use ``{event}`` and ``{concepts}`` (the concepts joined by ", ").
    ``positions``: explicit canvas start positions of the anchor slots (one per concept), or
    ``None`` to spread them evenly. ``shuffle``: assign concepts to slots in a per-sample random
    order (seeded) instead of the order given.
    """

    concepts: tuple[str, ...]
    event: str
    template: str = DEFAULT_TEMPLATE
    positions: tuple[int, ...] | None = None
    shuffle: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "concepts", tuple(self.concepts))
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))
        validate_concepts(self.concepts)
        if self.positions is not None and len(self.positions) != len(self.concepts):
            raise ValueError(
                f"positions: {len(self.positions)} positions given for {len(self.concepts)} concepts"
            )

    def prompt_text(self) -> str:
        try:
            return self.template.format(event=self.event, concepts=", ".join(self.concepts))
        except (KeyError, IndexError) as err:
            raise ValueError(
                f"template: unknown placeholder {err}; use {{event}} and {{concepts}} only "
                "(double braces {{ }} for literal ones)"
            ) from None


def template_problem(text: str) -> str | None:
    """Why ``text`` is not a usable prompt template, or None when it is. The one rule for every
    template (study files, the HTTP API, the UI): only the bare placeholders ``{event}`` and
    ``{concepts}`` (no format spec, conversion, index or attribute: ``{event:>999999}`` would build a
    prompt of a million characters), and ``{event}`` present, or every event gets the same prompt."""
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(text) if name is not None]
    except ValueError as err:
        return f"is not a valid template ({err}); use {{event}} and {{concepts}}, double braces for literal ones"
    unknown = sorted({name for name, _, _ in fields if name not in ("event", "concepts")})
    if unknown:
        return f"unknown placeholder(s) {unknown}; use {{event}} and {{concepts}} only (double braces for literal ones)"
    for name, spec, conv in fields:
        if spec or conv:
            shown = "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            return (f"placeholder {shown[:80]!r} is not allowed; use {{event}} and {{concepts}} only "
                    "(double braces for literal ones)")
    if "event" not in {name for name, _, _ in fields}:
        return "does not use {event}, so every event would get the same prompt"
    return None


def validate_concepts(concepts: Sequence[str]) -> None:
    """Reject empty, blank-padded or duplicate concepts, naming the offender."""
    if not concepts:
        raise ValueError("concepts: at least one concept is needed")
    seen: set[str] = set()
    for concept in concepts:
        if not isinstance(concept, str) or not concept.strip():
            raise LayoutError(str(concept), "empty concept")
        if concept != concept.strip():
            raise LayoutError(concept, "leading or trailing whitespace")
        key = concept.casefold()
        if key in seen:
            raise LayoutError(concept, "duplicate concept")
        seen.add(key)


def concept_token_ids(tokenizer: PreTrainedTokenizerBase, concept: str) -> tuple[int, ...]:
    """The tokens of ``concept`` as it appears mid-sentence (after a space), no special tokens."""
    ids = tuple(tokenizer.encode(" " + concept, add_special_tokens=False))
    if not ids:
        raise LayoutError(concept, "tokenizes to no tokens")
    return ids


@dataclass(frozen=True)
class PromptEncoding:
    """The encoded prompt and the tokens pinned at the canvas start (the thought block, if any)."""

    text: str
    ids: tuple[int, ...]
    canvas_prefix_ids: tuple[int, ...] = field(default=())
    chat_template: bool = False


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, text: str, *, pin_thought_channel: bool = True
) -> PromptEncoding:
    """The chat template (as a user turn, with the generation prompt) where the tokenizer has one,
    plain text with a leading BOS otherwise. With a chat template and ``pin_thought_channel``, the
    empty thought block becomes a pinned canvas prefix, so anchors and free positions hold answer text.
    """
    if getattr(tokenizer, "chat_template", None):
        # list[int], or a BatchEncoding holding it (transformers' own annotation is a wider union)
        ids: Any = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding (a UserDict, not a dict)
            ids = ids["input_ids"]
        prefix: tuple[int, ...] = ()
        if pin_thought_channel:
            prefix = tuple(tokenizer.encode(THOUGHT_CHANNEL, add_special_tokens=False))
        rendered = cast(str, tokenizer.decode(ids))  # one sequence: one string
        return PromptEncoding(rendered, tuple(int(i) for i in ids), prefix, chat_template=True)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id, *ids]
    return PromptEncoding(text, tuple(int(i) for i in ids))


def even_slots(lengths: Sequence[int], canvas_length: int, first_free: int = 0) -> list[int]:
    """Start positions that spread anchors of the given lengths evenly over
    ``first_free .. canvas_length - 1``, with equal free gaps before, between and after them."""
    free = canvas_length - first_free - sum(lengths)
    starts, used = [], first_free
    for j, length in enumerate(lengths):
        gap_end = round((j + 1) * free / (len(lengths) + 1))
        gap_start = round(j * free / (len(lengths) + 1))
        used += gap_end - gap_start
        starts.append(used)
        used += length
    return starts


def layout_samples(
    dish: Dish,
    concept_ids: dict[str, tuple[int, ...]],
    canvas_length: int,
    n_samples: int,
    seed: int | None,
    first_free: int = 0,
) -> list[list[AnchorSpan]]:
    """Per sample, the anchors in canvas order. Raises :class:`LayoutError` for a bad layout."""
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    total = sum(len(concept_ids[c]) for c in dish.concepts)
    room = canvas_length - first_free
    if total > room:
        raise LayoutError(
            max(dish.concepts, key=lambda c: len(concept_ids[c])),
            f"the concepts need {total} anchor tokens but the canvas has {room} free positions",
        )
    rng = np.random.default_rng(seed)
    layouts = []
    for _ in range(n_samples):
        order = list(dish.concepts)
        if dish.shuffle:
            order = [order[i] for i in rng.permutation(len(order))]
        if dish.positions is None:
            starts = even_slots([len(concept_ids[c]) for c in order], canvas_length, first_free)
        else:
            starts = list(dish.positions)
        spans = [AnchorSpan(c, s, concept_ids[c]) for c, s in zip(order, starts)]
        check_spans(spans, canvas_length, first_free)
        layouts.append(sorted(spans, key=lambda a: a.start))
    return layouts


def check_spans(spans: Sequence[AnchorSpan], canvas_length: int, first_free: int = 0) -> None:
    """Every anchor inside ``first_free .. canvas_length - 1`` and no two overlapping."""
    for span in spans:
        if span.start < first_free or span.end > canvas_length:
            raise LayoutError(
                span.concept,
                f"occupies positions {span.start}..{span.end - 1}, outside the free canvas "
                f"{first_free}..{canvas_length - 1}",
            )
    ordered = sorted(spans, key=lambda a: a.start)
    for earlier, later in zip(ordered, ordered[1:]):
        if later.start < earlier.end:
            raise LayoutError(
                later.concept,
                f"overlaps {earlier.concept!r} (positions {earlier.start}..{earlier.end - 1})",
            )


def pinned_arrays(
    layouts: Sequence[Sequence[AnchorSpan]], canvas_prefix: Sequence[int], length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per sample, what the sampler pins: (S, L) bool mask and (S, L) int64 token ids (0 where
    free); the canvas prefix (the thought block) on every sample, then each sample's anchors."""
    mask = np.zeros((len(layouts), length), dtype=bool)
    ids = np.zeros((len(layouts), length), dtype=np.int64)
    for s, spans in enumerate(layouts):
        if canvas_prefix:
            mask[s, : len(canvas_prefix)] = True
            ids[s, : len(canvas_prefix)] = list(canvas_prefix)
        for span in spans:
            mask[s, span.start : span.end] = True
            ids[s, span.start : span.end] = list(span.token_ids)
    return mask, ids
