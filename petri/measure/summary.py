"""One event's measurements, each computed once (no torch).

An :class:`EventSummary` wraps one :class:`~petri.core.trajectory.Trajectory` and computes, on first
use and once only, what the tidy tables, the API's answer, the UI and a study's analysis all read: the
flips per position, the segments between adjacent anchors with their instability, and the anchors'
preservation rows. Every table function of :mod:`petri.measure.tables` takes a trajectory or its
summary; a reader that builds several tables of one event (a run's CSVs, ``POST /api/seed``'s answer)
makes the summary once and passes it, so the flips are counted once per event, not once per table.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from petri.core.trajectory import Trajectory
from petri.measure.metrics import (
    Pair,
    Segment,
    anchor_agreement,
    anchor_intact_in_text,
    flip_counts,
    pair_segment_values,
    segment_instability,
    segments,
)


def tagged(traj: Trajectory, columns: dict, texts: bool = True) -> pd.DataFrame:
    """``columns`` as a frame that starts with the trajectory's ``event`` and ``template`` (unless
    ``texts`` is false) and ``model_id``."""
    tags = {"event": traj.event, "template": traj.template} if texts else {}
    return pd.DataFrame({**tags, "model_id": traj.model_id, **columns})


def preservation_summary(anchors: pd.DataFrame) -> dict[str, float | int]:
    """Anchor preservation of any set of :func:`~petri.measure.tables.anchors_table` rows (one
    event, one group, a whole study): anchors_total, anchors_intact, intact_share (NaN without
    anchors) and mean_agreement (NaN without anchors)."""
    total = int(len(anchors))
    intact = int(anchors["intact"].sum()) if total else 0
    return {
        "anchors_total": total,
        "anchors_intact": intact,
        "intact_share": intact / total if total else float("nan"),
        "mean_agreement": float(anchors["agreement"].mean()) if total else float("nan"),
    }


class EventSummary:
    """The measurements of one event's trajectory ``traj`` (S samples, T steps, L positions), each
    computed on first use: :attr:`flips` ``(S, L)``, :attr:`segments` and :attr:`anchors`."""

    def __init__(self, traj: Trajectory):
        self.traj = traj

    @cached_property
    def flips(self) -> np.ndarray:
        """Flips per position ``(S, L)`` int (:func:`petri.measure.metrics.flip_counts`; 0 at anchors)."""
        return flip_counts(self.traj.argmax, self.traj.steps, self.traj.anchor_mask)

    @cached_property
    def segments(self) -> tuple[list[Segment], np.ndarray]:
        """The segments between adjacent anchors of every sample and their instability ``(n_segments,)``
        (mean flips over the segment's positions; NaN for an empty segment)."""
        segs = segments(self.traj.anchors)
        return segs, segment_instability(self.flips, segs)

    @cached_property
    def pair_segments(self) -> dict[Pair, np.ndarray]:
        """Each unordered pair seen adjacent (sorted) → its observed (non-empty) segments' instability
        (:func:`petri.measure.metrics.pair_segment_values`): the pairs table's rows, in order."""
        return pair_segment_values(*self.segments)

    @cached_property
    def preservation(self) -> dict[str, float | int]:
        """The event's :func:`preservation_summary` of all its :attr:`anchors` rows."""
        return preservation_summary(self.anchors)

    @cached_property
    def anchors(self) -> pd.DataFrame:
        """One row per sample × anchor (each sample's anchors in ``traj.anchors`` order): event,
        template, model_id, sample, concept, start, end, intact (reading 1: the concept is a whole word
        of the sample's final text) and agreement (reading 2: share of the sample's steps whose
        unforced argmax equals the anchor's tokens). Read through :func:`petri.measure.tables.anchors_table`."""
        traj = self.traj
        agreement = anchor_agreement(traj.argmax, traj.steps, traj.anchors)
        rows = [
            (s, a.concept, a.start, a.end, anchor_intact_in_text(text, a.concept), share)
            for s, (text, spans) in enumerate(zip(traj.final_texts, traj.anchors))
            for a, share in zip(spans, agreement[s])
        ]
        columns = ["sample", "concept", "start", "end", "intact", "agreement"]
        frame = pd.DataFrame(rows, columns=columns).astype(
            {"sample": int, "start": int, "end": int, "intact": bool, "agreement": float}
        )
        return tagged(traj, {c: frame[c].to_numpy() for c in columns})

    @cached_property
    def kept_by_sample(self) -> list[dict[str, float | int]]:
        """Each sample's :func:`preservation_summary` of its :attr:`anchors` rows ``(S,)``."""
        anchors = self.anchors
        return [preservation_summary(anchors[anchors["sample"] == s]) for s in range(self.traj.n_samples)]

    @cached_property
    def mean_flips_free(self) -> np.ndarray:
        """Mean flips over each sample's free (non-anchor) positions ``(S,)`` (NaN without any)."""
        free = ~self.traj.anchor_mask
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.flips.sum(axis=1) / free.sum(axis=1)  # anchors count 0 flips


def summary_of(event: Trajectory | EventSummary) -> EventSummary:
    """``event``'s summary: itself when it is one, else a new one of the trajectory."""
    return event if isinstance(event, EventSummary) else EventSummary(event)
