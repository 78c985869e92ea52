"""A :class:`~petri.core.trajectory.Trajectory` as tidy pandas tables (no torch).

The per-sample and per-pair tables start with the columns ``event``, ``template`` and ``model_id``
copied from the trajectory, so tables of several runs can be concatenated with ``pd.concat``. The
per-position and per-segment tables start with ``model_id`` only: they have a row per sample ×
position (or segment), and repeating the event and template texts (up to 2,000 characters each) on
every row made them hundreds of MB; a row finds its texts through ``sample`` (and, in a run's
tables, ``event_index``) in the samples table.

Each table takes a trajectory or its :class:`~petri.measure.summary.EventSummary`: given the summary,
the flips, segments and anchor rows it holds are computed once for every table of the event.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from petri.core.trajectory import Trajectory
from petri.measure.level_metrics import metric_columns
from petri.measure.metrics import anchor_concepts, commit_steps, step_sum
from petri.measure.sample_metrics import sample_metrics
from petri.measure.summary import (
    EventSummary,
    preservation_summary,  # noqa: F401  (read from here by the study and the API)
    summary_of,
)
from petri.measure.summary import tagged as _tagged

#: What every table takes: one event's trajectory, or its summary (computed once for all its tables).
Event = Trajectory | EventSummary


def positions_table(event: Event) -> pd.DataFrame:
    """One row per sample × position (no event or template text: see the module docstring).

    Columns: model_id, sample, position, is_anchor (from ``anchor_mask``), concept (``""`` off anchors),
    final_token_id, flips (0 at anchors), commit_step (of the raw argmax, anchors included),
    mean_entropy and accepted_steps (over the steps the sample ran).
    """
    summary = summary_of(event)
    traj = summary.traj
    n, length = traj.n_samples, traj.canvas_length
    steps = traj.steps
    return _tagged(
        traj,
        {
            "sample": np.repeat(np.arange(n), length),
            "position": np.tile(np.arange(length), n),
            "is_anchor": traj.anchor_mask.ravel(),
            "concept": anchor_concepts(traj.anchors, length).ravel(),
            "final_token_id": traj.final_ids.ravel(),
            "flips": summary.flips.ravel(),
            "commit_step": commit_steps(traj.argmax, steps).ravel(),
            "mean_entropy": (step_sum(traj.entropy, steps) / steps[:, None]).ravel(),
            "accepted_steps": step_sum(traj.accepted, steps).astype(int).ravel(),
        },
        texts=False,
    )


def segments_table(event: Event) -> pd.DataFrame:
    """One row per segment (no event or template text): model_id, sample, left, right, pair (``"a|b"``, sorted),
    start, end, length, then a column per registered segment metric
    (:func:`petri.measure.level_metrics.metrics`, in registration order; built in: instability, NaN for
    empty segments)."""
    summary = summary_of(event)
    segs, _ = summary.segments
    keys = {
        "sample": [g.sample for g in segs],
        "left": [g.left for g in segs],
        "right": [g.right for g in segs],
        "pair": ["|".join(g.pair) for g in segs],
        "start": [g.start for g in segs],
        "end": [g.end for g in segs],
        "length": [g.length for g in segs],
    }
    return _tagged(summary.traj, {**keys, **metric_columns(summary, "segment")}, texts=False)


def anchors_table(event: Event) -> pd.DataFrame:
    """One row per sample × anchor (each sample's anchors in ``traj.anchors`` order): sample,
    concept, start, end, intact (reading 1: the concept is a whole word of the sample's final text)
    and agreement (reading 2: share of the sample's steps whose unforced argmax equals the anchor's
    tokens), after event, template and model_id. Every preservation figure (per sample, per event,
    per study) aggregates these rows (:attr:`~petri.measure.summary.EventSummary.anchors`; a copy)."""
    return summary_of(event).anchors.copy()


def samples_table(event: Event) -> pd.DataFrame:
    """One row per sample: ``sample``, then a column per registered per-sample metric
    (:func:`petri.measure.sample_metrics.sample_metrics`, in registration order), after event,
    template and model_id.

    The built-in columns: steps, mean_flips_free (mean flips over non-anchor positions),
    settled_share (free positions that did not flip in the last 3 steps), anchor_layout
    (``"person@3,order@20"`` in canvas order), final_text, and the sample's
    :func:`preservation_summary` as anchors_intact, n_anchors and mean_agreement (NaN without
    anchors).
    """
    summary = summary_of(event)
    columns: dict[str, Any] = {"sample": np.arange(summary.traj.n_samples)}
    columns.update({m.column: m.values(summary) for m in sample_metrics()})
    return _tagged(summary.traj, columns)


def pairs_table(event: Event) -> pd.DataFrame:
    """One row per unordered pair seen adjacent: pair (``"a|b"``), then a column per registered pair
    metric (:func:`petri.measure.level_metrics.metrics`, in registration order; built in: n_segments,
    the non-empty segments averaged, and instability, NaN when every segment of the pair was empty)."""
    summary = summary_of(event)
    pairs = {"pair": ["|".join(p) for p in summary.pair_segments]}
    return _tagged(summary.traj, {**pairs, **metric_columns(summary, "pair")})
