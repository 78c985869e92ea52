"""A :class:`~petri.core.trajectory.Trajectory` as tidy pandas tables (no torch).

The per-sample and per-pair tables start with the columns ``event``, ``template`` and ``model_id``
copied from the trajectory, so tables of several runs can be concatenated with ``pd.concat``. The
per-position and per-segment tables start with ``model_id`` only: they have a row per sample ×
position (or segment), and repeating the event and template texts (up to 2,000 characters each) on
every row made them hundreds of MB; a row finds its texts through ``sample`` (and, in a run's
tables, ``event_index``) in the samples table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from petri.measure.metrics import (
    Segment,
    anchor_agreement,
    anchor_concepts,
    anchor_intact_in_text,
    commit_steps,
    flip_counts,
    in_canvas_order,
    pair_instability,
    pair_segment_values,
    segment_instability,
    segments,
    settled_share,
    step_sum,
)
from petri.core.trajectory import Trajectory


def _tagged(traj: Trajectory, columns: dict, texts: bool = True) -> pd.DataFrame:
    tags = {"event": traj.event, "template": traj.template} if texts else {}
    return pd.DataFrame({**tags, "model_id": traj.model_id, **columns})


def _flips(traj: Trajectory) -> np.ndarray:
    return flip_counts(traj.argmax, traj.steps, traj.anchor_mask)


def _segments(traj: Trajectory) -> tuple[list[Segment], np.ndarray]:
    segs = segments(traj.anchors)
    return segs, segment_instability(_flips(traj), segs)


def positions_table(traj: Trajectory) -> pd.DataFrame:
    """One row per sample × position (no event or template text: see the module docstring).

    Columns: model_id, sample, position, is_anchor (from ``anchor_mask``), concept (``""`` off anchors),
    final_token_id, flips (0 at anchors), commit_step (of the raw argmax, anchors included),
    mean_entropy and accepted_steps (over the steps the sample ran).
    """
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
            "flips": _flips(traj).ravel(),
            "commit_step": commit_steps(traj.argmax, steps).ravel(),
            "mean_entropy": (step_sum(traj.entropy, steps) / steps[:, None]).ravel(),
            "accepted_steps": step_sum(traj.accepted, steps).astype(int).ravel(),
        },
        texts=False,
    )


def segments_table(traj: Trajectory) -> pd.DataFrame:
    """One row per segment (no event or template text): model_id, sample, left, right, pair (``"a|b"``, sorted), start, end, length,
    instability (NaN for empty segments)."""
    segs, values = _segments(traj)
    return _tagged(
        traj,
        {
            "sample": [g.sample for g in segs],
            "left": [g.left for g in segs],
            "right": [g.right for g in segs],
            "pair": ["|".join(g.pair) for g in segs],
            "start": [g.start for g in segs],
            "end": [g.end for g in segs],
            "length": [g.length for g in segs],
            "instability": values,
        },
        texts=False,
    )


def anchors_table(traj: Trajectory) -> pd.DataFrame:
    """One row per sample × anchor (each sample's anchors in ``traj.anchors`` order): sample,
    concept, start, end, intact (reading 1: the concept is a whole word of the sample's final text)
    and agreement (reading 2: share of the sample's steps whose unforced argmax equals the anchor's
    tokens). Every preservation figure (per sample, per event, per study) aggregates these rows."""
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
    return _tagged(traj, {c: frame[c].to_numpy() for c in columns})


def preservation_summary(anchors: pd.DataFrame) -> dict[str, float | int]:
    """Anchor preservation of any set of :func:`anchors_table` rows (one event, one group, a whole
    study): anchors_total, anchors_intact, intact_share (NaN without anchors) and mean_agreement
    (NaN without anchors)."""
    total = int(len(anchors))
    intact = int(anchors["intact"].sum()) if total else 0
    return {
        "anchors_total": total,
        "anchors_intact": intact,
        "intact_share": intact / total if total else float("nan"),
        "mean_agreement": float(anchors["agreement"].mean()) if total else float("nan"),
    }


def samples_table(traj: Trajectory, last_k: int = 3) -> pd.DataFrame:
    """One row per sample.

    Columns: sample, steps, mean_flips_free (mean flips over non-anchor positions), settled_share
    (free positions that did not flip in the last ``last_k`` steps), anchor_layout
    (``"person@3,order@20"`` in canvas order), final_text, and the sample's
    :func:`preservation_summary` as anchors_intact, n_anchors and mean_agreement (NaN without
    anchors).
    """
    free = ~traj.anchor_mask
    anchors = anchors_table(traj)
    kept = [preservation_summary(anchors[anchors["sample"] == s]) for s in range(traj.n_samples)]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_flips_free = _flips(traj).sum(axis=1) / free.sum(axis=1)  # anchors count 0 flips
    return _tagged(
        traj,
        {
            "sample": np.arange(traj.n_samples),
            "steps": traj.steps,
            "mean_flips_free": mean_flips_free,
            "settled_share": settled_share(traj.argmax, traj.steps, last_k, traj.anchor_mask),
            "anchor_layout": [
                ",".join(f"{a.concept}@{a.start}" for a in in_canvas_order(spans))
                for spans in traj.anchors
            ],
            "final_text": traj.final_texts,
            "anchors_intact": [k["anchors_intact"] for k in kept],
            "n_anchors": [k["anchors_total"] for k in kept],
            "mean_agreement": [k["mean_agreement"] for k in kept],
        },
    )


def pairs_table(traj: Trajectory) -> pd.DataFrame:
    """One row per unordered pair seen adjacent: pair (``"a|b"``), n_segments (non-empty
    segments averaged), instability (NaN when every segment of the pair was empty)."""
    segs, values = _segments(traj)
    means = pair_instability(segs, values)
    counts = {p: v.size for p, v in pair_segment_values(segs, values).items()}
    return _tagged(
        traj,
        {
            "pair": ["|".join(p) for p in means],
            "n_segments": [counts[p] for p in means],
            "instability": list(means.values()),
        },
    )
