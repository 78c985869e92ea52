"""Shared slot positions for the conditions of one event (the paired design).

Every condition of a paired study's event must pin its concepts at the same canvas positions, sample
by sample, whatever their token lengths, so that the conditions differ only in what they pin (and in
the prompt). :class:`SharedSlotsDish` carries every concept the event pins under any condition
(``slot_concepts``); on a model (:func:`resolve_dish`) it becomes a plain
:class:`~petri.core.dish.Dish` with explicit ``positions``: ``k`` slots (``k`` = concepts per
condition) each as wide as the longest of ``slot_concepts`` in tokens, spread evenly over the free
canvas (:func:`~petri.core.dish.even_slots`). The per-sample shuffle of concepts over slots draws
``rng.permutation(k)`` from the batch seed, which every condition shares, so the ``i``-th concept of
one condition takes the same slot as the ``i``-th of another in every sample. A shorter anchor leaves
the rest of its slot free.
"""

from __future__ import annotations

from dataclasses import dataclass

from petri.core.dish import Dish, LayoutError, concept_token_ids, encode_prompt, even_slots
from petri.core.settings import FamilySettings
from petri.engine.base import SamplingModel

__all__ = ["SharedSlotsDish", "resolve_dish", "shared_positions"]


@dataclass(frozen=True)
class SharedSlotsDish(Dish):
    """A dish whose slots are sized by ``slot_concepts`` (every concept of the event's conditions)."""

    slot_concepts: tuple[str, ...] = ()


def shared_positions(lm: SamplingModel, slot_concepts: tuple[str, ...], n_slots: int,
                     settings: FamilySettings) -> tuple[int, ...]:
    """The start positions of ``n_slots`` slots as wide as the longest of ``slot_concepts`` (tokens),
    spread evenly after the canvas prefix (the pinned thought block, when the settings pin it)."""
    lengths = {c: len(concept_token_ids(lm.tokenizer, c)) for c in slot_concepts}
    widest = max(lengths, key=lambda c: lengths[c])
    prefix = encode_prompt(lm.tokenizer, "x", pin_thought_channel=settings.pin_thought_channel).canvas_prefix_ids
    room = lm.canvas_length - len(prefix)
    if lengths[widest] * n_slots > room:
        raise LayoutError(widest, f"the paired conditions share {n_slots} slots as wide as this concept "
                                  f"({lengths[widest]} tokens), {lengths[widest] * n_slots} positions in all, but the "
                                  f"canvas has {room} free positions")
    return tuple(even_slots([lengths[widest]] * n_slots, lm.canvas_length, len(prefix)))


def resolve_dish(lm: SamplingModel, dish: Dish, settings: FamilySettings) -> Dish:
    """``dish`` as sampled on ``lm``: a :class:`SharedSlotsDish` gets its shared positions, any
    other dish is returned as it is."""
    if not isinstance(dish, SharedSlotsDish):
        return dish
    positions = shared_positions(lm, dish.slot_concepts, len(dish.concepts), settings)
    return Dish(dish.concepts, dish.event, dish.template, positions=positions, shuffle=dish.shuffle)
