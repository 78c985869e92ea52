"""A seed request planned once (no torch): every event's encoded prompt and every sample's anchor
layout, made at the edge (the API's request check, the UI, :meth:`petri.app.service.PetriService.plan`)
and passed down to the sampler, so nothing lays a dish out twice.

:func:`petri.engine.seeding.plan_seed` makes a :class:`SeedPlan` from a tokenizer-bearing model;
:func:`petri.engine.seeding.sample_planned` samples one of its events as planned. The plan holds
what each sample pins, ``pinned`` ``(S, L)`` bool: the thought block at the canvas start and the
sample's anchors (:func:`petri.core.dish.pinned_arrays`), the mask the live view and every step's
:class:`~petri.engine.base.LiveStep` carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from petri.core.dish import Dish, PromptEncoding
from petri.core.trajectory import AnchorSpan


@dataclass(frozen=True)
class SeedEvent:
    """One event of a seed request: the dish to sample and an optional group label."""

    dish: Dish
    group: str | None = None


@dataclass(frozen=True, eq=False)
class PlannedEvent:
    """One event as it will be sampled: its ``prompt`` (the encoded prompt (P,) and the canvas
    prefix pinned on every sample), ``layouts`` (S samples' anchors, each in the order laid out) and
    ``pinned`` ``(S, L)`` bool (what each sample pins)."""

    event: SeedEvent
    prompt: PromptEncoding
    layouts: tuple[tuple[AnchorSpan, ...], ...]
    pinned: np.ndarray

    @property
    def dish(self) -> Dish:
        return self.event.dish


@dataclass(frozen=True, eq=False)
class SeedPlan:
    """A seed run planned: its ``events`` (one batch of ``samples`` each), the family's
    ``settings``, the base ``seed`` (every event's layouts and draws start from it) and the
    ``run_id`` it is stored under (``None``: not a stored run, e.g. the command line's ``seed``; the
    service then gives it one)."""

    events: tuple[PlannedEvent, ...]
    samples: int
    settings: Any
    seed: int = 0
    run_id: str | None = None

    def __post_init__(self):
        if not self.events:
            raise ValueError("events: a seed plan needs at least one event")
        for index, planned in enumerate(self.events):
            if len(planned.layouts) != self.samples or planned.pinned.shape[0] != self.samples:
                raise ValueError(f"events[{index}]: {len(planned.layouts)} layouts for {self.samples} samples")

    @property
    def groups(self) -> list[str | None]:
        return [p.event.group for p in self.events]

    def stored_request(self) -> dict:
        """The request as the run store records it (events, samples, settings, seed)."""
        return {
            "events": [_event_record(p.dish, p.event.group) for p in self.events],
            "n_samples": self.samples,
            "settings": self.settings.to_dict(),
            "seed": self.seed,
        }


def _event_record(dish: Dish, group: str | None) -> dict:
    return {"event": dish.event, "group": group, "concepts": list(dish.concepts), "template": dish.template,
            "shuffle": dish.shuffle, "positions": list(dish.positions) if dish.positions is not None else None}

