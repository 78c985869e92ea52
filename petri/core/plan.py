"""Requests planned once (no torch): a seed's (:class:`SeedPlan`) and a probe read's (:class:`ProbePlan`).

A seed request planned once: every event's encoded prompt and every sample's anchor
layout, made at the edge (the API's request check, the UI, :meth:`petri.app.service.PetriService.plan`)
and passed down to the sampler, so nothing lays a dish out twice.

:func:`petri.engine.seeding.plan_seed` makes a :class:`SeedPlan` from a tokenizer-bearing model;
:func:`petri.engine.seeding.sample_planned` samples one of its events as planned. The plan holds
what each sample pins, ``pinned`` ``(S, L)`` bool: the thought block at the canvas start and the
sample's anchors (:func:`petri.core.dish.pinned_arrays`), the mask the live view and every step's
:class:`~petri.engine.base.LiveStep` carry.

A probe read planned once (:func:`petri.engine.probe.plan_probe`, at the edge: ``POST /api/probe``,
the UI's Probe tab) holds the checked :class:`~petri.core.probe.ProbeRequest` and its
:class:`ProbeLayout` on the model, as given and in each listing order it is read in;
:func:`petri.engine.probe.read_planned` reads it as planned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from petri.core.dish import Dish, PromptEncoding
from petri.core.probe import FrameLayout, ListingOrder, ProbeRequest
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



@dataclass(frozen=True)
class ProbeLayout:
    """A probe request on one model, before any model work: the encoded prompt (its text, ids (P,)
    and the canvas prefix pinned before the frame), the frame's canvas layout and the family's settings."""

    prompt_text: str
    prompt_ids: tuple[int, ...]
    prefix_ids: tuple[int, ...]
    layout: FrameLayout
    settings: object


@dataclass(frozen=True)
class ProbePlan:
    """A probe read planned on one model: the ``request``, its layout as given (``base``: the slots,
    labels, levels and the prompt the result reports) and, per listing order it is read in
    (``orders``, :func:`petri.core.probe.listing_orders`), the layout of the request listed in that
    order (``listed``, one per order)."""

    request: ProbeRequest
    base: ProbeLayout
    orders: tuple[ListingOrder, ...]
    listed: tuple[ProbeLayout, ...]

    def __post_init__(self):
        if not self.orders or len(self.listed) != len(self.orders):
            raise ValueError(f"listed: {len(self.listed)} layouts for {len(self.orders)} listing orders")

    @property
    def layout(self) -> FrameLayout:
        return self.base.layout
