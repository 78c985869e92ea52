"""Where the model struggled: flips, commit steps, segments and anchor preservation (numpy only).

Shapes: ``S`` samples, ``T`` the most denoising steps any sample ran, ``L`` the canvas length.
``argmax`` is the raw (unforced) argmax history ``(S, T, L)`` of a
:class:`~petri.core.trajectory.Trajectory` and ``steps`` ``(S,)`` the steps each sample actually ran;
steps ``t >= steps[s]`` are padding and are never read, whatever they hold.

A position *flips* at step ``t`` (``1 <= t < steps[s]``) when
``argmax[s, t, i] != argmax[s, t-1, i]``.
Definitions follow DESIGN.md, "Metric definitions".
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from petri.core.trajectory import AnchorSpan

Pair = tuple[str, str]


# --------------------------------------------------------------------------- validation helpers


def _steps(steps, n: int, t_max: int) -> np.ndarray:
    steps = np.asarray(steps)
    if steps.shape != (n,) or not np.issubdtype(steps.dtype, np.integer):
        raise ValueError(
            f"steps must be an integer array of shape ({n},), got {steps.dtype} {steps.shape}"
        )
    if n and (steps.min() < 1 or steps.max() > t_max):
        raise ValueError(f"steps must lie in 1..{t_max} (the step axis), got {steps.tolist()}")
    return steps


def _history(argmax, steps) -> tuple[np.ndarray, np.ndarray]:
    argmax = np.asarray(argmax)
    if argmax.ndim != 3 or not np.issubdtype(argmax.dtype, np.integer):
        raise ValueError(
            f"argmax must be an integer array of shape (S, T, L), got {argmax.dtype} {argmax.shape}"
        )
    return argmax, _steps(steps, argmax.shape[0], argmax.shape[1])


def _anchor_mask(anchor_mask, shape: tuple[int, int]) -> np.ndarray:
    if anchor_mask is None:
        return np.zeros(shape, dtype=bool)
    anchor_mask = np.asarray(anchor_mask)
    if anchor_mask.shape != shape or anchor_mask.dtype != bool:
        raise ValueError(
            f"anchor_mask must be a bool array of shape {shape}, "
            f"got {anchor_mask.dtype} {anchor_mask.shape}"
        )
    return anchor_mask


def _check_anchors(anchors: Sequence[Sequence[AnchorSpan]], n: int | None, length: int | None):
    if n is not None and len(anchors) != n:
        raise ValueError(f"anchors must hold one list per sample ({n}), got {len(anchors)}")
    for s, spans in enumerate(anchors):
        for a in spans:
            if not isinstance(a, AnchorSpan):
                raise ValueError(f"anchors[{s}] must hold AnchorSpan objects, got {a!r}")
            if not a.token_ids or a.start < 0 or (length is not None and a.end > length):
                raise ValueError(
                    f"anchors[{s}]: {a.concept!r} must have tokens and lie in the canvas "
                    f"0..{'L' if length is None else length}, got positions {a.start}..{a.end}"
                )


# --------------------------------------------------------------------------- per-step reductions


def steps_run(steps, t_max: int) -> np.ndarray:
    """``(S,)`` steps → ``(S, T)`` bool: True where step ``t`` was run by sample ``s``."""
    return np.arange(t_max)[None, :] < np.asarray(steps)[:, None]


def step_sum(values, steps) -> np.ndarray:
    """Sum of ``values`` ``(S, T, L)`` over the steps each sample ran → ``(S, L)`` float.

    Padding (``t >= steps[s]``) is skipped even when it holds NaN; divide by ``steps[:, None]``
    for a mean over the steps run.
    """
    values = np.asarray(values)
    if values.ndim != 3:
        raise ValueError(f"values must have shape (S, T, L), got {values.shape}")
    steps = _steps(steps, values.shape[0], values.shape[1])
    ran = steps_run(steps, values.shape[1])[:, :, None]
    return np.where(ran, values, 0).sum(axis=1, dtype=float)


# --------------------------------------------------------------------------- flips and commits


def step_flips(previous, current) -> np.ndarray:
    """One denoising step against the step before it: ``previous`` and ``current`` argmax of the
    same shape (e.g. ``(S, L)``) → bool of that shape, True where the argmax changed (a flip).
    The live view applies it to each new step as it arrives; :func:`flip_grid` to a whole history."""
    previous, current = np.asarray(previous), np.asarray(current)
    if previous.shape != current.shape:
        raise ValueError(f"previous and current must have the same shape, got {previous.shape} and {current.shape}")
    return previous != current


def flip_grid(argmax, steps, anchor_mask=None) -> np.ndarray:
    """Where each sample flipped: ``argmax`` ``(S, T, L)`` int, ``steps`` ``(S,)`` int,
    ``anchor_mask`` ``(S, L)`` bool or None → ``(S, T, L)`` bool, True where
    ``1 <= t < steps[s]`` and ``argmax[s, t, i] != argmax[s, t-1, i]`` (never at step 0, in padding,
    or at a position of ``anchor_mask``). Every flip count, commit step and flip figure reads it."""
    argmax, steps = _history(argmax, steps)
    mask = _anchor_mask(anchor_mask, (argmax.shape[0], argmax.shape[2]))
    flipped = np.zeros(argmax.shape, dtype=bool)
    flipped[:, 1:] = step_flips(argmax[:, :-1], argmax[:, 1:])
    flipped &= steps_run(steps, argmax.shape[1])[:, :, None]
    flipped &= ~mask[:, None, :]
    return flipped


def flip_counts(argmax, steps, anchor_mask=None) -> np.ndarray:
    """Flips per position.

    ``argmax`` ``(S, T, L)`` int, ``steps`` ``(S,)`` int, ``anchor_mask`` ``(S, L)`` bool or None
    → ``(S, L)`` int: ``sum over 1 <= t < steps[s] of [argmax[s,t,i] != argmax[s,t-1,i]]``,
    0 at anchor positions (so never average them in: select the free positions).
    """
    return flip_grid(argmax, steps, anchor_mask).sum(axis=1)


def sample_flip_counts(history) -> np.ndarray:
    """Flips per position of one sample's unpadded history ``(T, L)`` → ``(L,)`` int.

    ``history`` is e.g. ``Trajectory.sample_argmax(s)``; anchors are not masked here.
    """
    history = np.asarray(history)
    if history.ndim != 2 or len(history) == 0:
        raise ValueError(f"history must have shape (T, L) with T >= 1, got {history.shape}")
    return flip_counts(history[None], np.array([len(history)]))[0]


def commit_steps(argmax, steps) -> np.ndarray:
    """Commit step per position: the first step after which the argmax never changes again.

    ``argmax`` ``(S, T, L)`` int, ``steps`` ``(S,)`` → ``(S, L)`` int in ``0 .. steps[s] - 1``
    (the step of the last flip, 0 for a position that never flipped). Anchor positions are
    reported too: their raw argmax is the model's unforced proposal.
    """
    argmax, steps = _history(argmax, steps)
    t = np.arange(argmax.shape[1])[None, :, None]
    return (t * flip_grid(argmax, steps)).max(axis=1)


def settled_share(argmax, steps, last_k: int = 3, anchor_mask=None) -> np.ndarray:
    """Share of free positions that did not flip in any of the last ``last_k`` steps run.

    ``argmax`` ``(S, T, L)``, ``steps`` ``(S,)``, ``anchor_mask`` ``(S, L)`` bool or None → ``(S,)``
    float. A position is settled when ``commit_step <= steps[s] - 1 - last_k``; a sample that
    ran ``last_k`` steps or fewer is judged over its whole run (settled = never flipped). NaN for
    a sample without free positions.
    """
    if not isinstance(last_k, (int, np.integer)) or isinstance(last_k, bool) or last_k < 1:
        raise ValueError(f"last_k must be an integer >= 1, got {last_k!r}")
    argmax, steps = _history(argmax, steps)
    free = ~_anchor_mask(anchor_mask, (argmax.shape[0], argmax.shape[2]))
    limit = np.maximum(steps - 1 - last_k, 0)[:, None]
    settled = (commit_steps(argmax, steps) <= limit) & free
    with np.errstate(invalid="ignore", divide="ignore"):
        return settled.sum(axis=1) / free.sum(axis=1)


# --------------------------------------------------------------------------- segments


@dataclass(frozen=True)
class Segment:
    """Positions ``start .. end - 1`` of sample ``sample``, strictly between two anchors that are
    adjacent in that sample's canvas order (``left`` comes first on the canvas).

    A segment between touching anchors is empty (``length == 0``): its instability is NaN and
    it is skipped in pair means.
    """

    sample: int
    left: str
    right: str
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def pair(self) -> Pair:
        """The unordered pair ``{left, right}`` as a sorted tuple."""
        first, second = sorted((self.left, self.right))
        return first, second


def in_canvas_order(spans: Sequence[AnchorSpan]) -> list[AnchorSpan]:
    """One sample's anchors sorted by start position."""
    return sorted(spans, key=lambda a: a.start)


def segments(anchors: Sequence[Sequence[AnchorSpan]]) -> list[Segment]:
    """Every segment of every sample; ``anchors[s]`` may be in any order.

    Sample ``s`` with ``k`` anchors gives ``k - 1`` segments (empty ones included), in canvas order.
    Overlapping anchors raise ValueError.
    """
    _check_anchors(anchors, None, None)
    out = []
    for s, spans in enumerate(anchors):
        for a, b in pairwise(in_canvas_order(spans)):
            if b.start < a.end:
                raise ValueError(
                    f"anchors[{s}]: {a.concept!r} (positions {a.start}..{a.end - 1}) overlaps "
                    f"{b.concept!r} (from {b.start})"
                )
            out.append(Segment(s, a.concept, b.concept, a.end, b.start))
    return out


def segment_instability(flips, segs: Sequence[Segment]) -> np.ndarray:
    """Mean flip count over each segment's positions.

    ``flips`` ``(S, L)`` (from :func:`flip_counts`) → ``(len(segs),)`` float, NaN for empty
    segments.
    """
    flips = np.asarray(flips, dtype=float)
    if flips.ndim != 2:
        raise ValueError(f"flips must have shape (S, L), got {flips.shape}")
    n, length = flips.shape
    idx = np.array([(g.sample, g.start, g.end) for g in segs], dtype=int).reshape(-1, 3)
    s, a, b = idx.T
    if ((s < 0) | (s >= n) | (a < 0) | (a > b) | (b > length)).any():
        raise ValueError(f"segs must lie within flips' {n} samples and canvas 0..{length}")
    cum = np.zeros((n, length + 1))
    cum[:, 1:] = np.cumsum(flips, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (cum[s, b] - cum[s, a]) / (b - a)


def pair_segment_values(segs: Sequence[Segment], seg_values) -> dict[Pair, np.ndarray]:
    """The observed (non-NaN) segment values of each unordered pair, pairs sorted.

    A pair seen only in empty segments maps to an empty array.
    """
    values = np.asarray(seg_values, dtype=float)
    if values.shape != (len(segs),):
        raise ValueError(f"seg_values must have shape ({len(segs)},), got {values.shape}")
    groups: dict[Pair, list[float]] = defaultdict(list)
    for seg, v in zip(segs, values):
        bucket = groups[seg.pair]
        if not np.isnan(v):
            bucket.append(v)
    return {p: np.array(v) for p, v in sorted(groups.items())}


def pair_instability(segs: Sequence[Segment], seg_values) -> dict[Pair, float]:
    """``instability(A, B)``: mean over every observed segment of the unordered pair {A, B}.

    ``seg_values`` ``(len(segs),)`` from :func:`segment_instability`; NaN (empty) segments are
    skipped; a pair with no non-empty segment gets NaN.
    """
    return pair_means(pair_segment_values(segs, seg_values))


def pair_means(groups: dict[Pair, np.ndarray]) -> dict[Pair, float]:
    """Each pair's mean of its observed segment values (:func:`pair_segment_values`); NaN for a pair
    with none."""
    return {p: float(v.mean()) if v.size else float("nan") for p, v in groups.items()}


# --------------------------------------------------------------------------- anchor preservation


def anchor_intact_in_text(final_text: str, concept: str) -> bool:
    """Reading (1): the concept occurs in ``final_text`` as a whole word, case-sensitively.

    Whole word: not preceded or followed by a word character (``\\w``), so ``"order"`` is not
    intact in ``"orders"`` or ``"preorder"`` but is in ``"order."`` or ``"order-taking"``.
    Case-sensitive because the pinned tokens fix the case (``"Order"`` is another token).
    Whitespace inside a multi-word concept matches any whitespace run. The match may be anywhere
    in the text, not necessarily at the anchor's position.
    """
    if not isinstance(final_text, str):
        raise ValueError(f"final_text must be a str, got {type(final_text).__name__}")
    if not isinstance(concept, str) or not concept.strip():
        raise ValueError(f"concept must be a non-empty string, got {concept!r}")
    body = r"\s+".join(map(re.escape, concept.split()))
    return re.search(rf"(?<!\w){body}(?!\w)", final_text) is not None


def anchor_agreement(
    argmax, steps, anchors: Sequence[Sequence[AnchorSpan]]
) -> list[list[float]]:
    """Reading (2): per sample, per anchor (in the given order), the share of the sample's steps
    in which the unforced argmax at *all* the anchor's positions equals its ``token_ids``.

    ``argmax`` ``(S, T, L)``, ``steps`` ``(S,)``, ``anchors`` S lists → S lists of floats in [0, 1].
    """
    argmax, steps = _history(argmax, steps)
    _check_anchors(anchors, argmax.shape[0], argmax.shape[2])
    ran = steps_run(steps, argmax.shape[1])

    def share(s: int, a: AnchorSpan) -> float:
        agrees = (argmax[s, :, a.start : a.end] == a.token_ids).all(axis=1) & ran[s]
        return float(agrees.sum() / steps[s])

    return [[share(s, a) for a in spans] for s, spans in enumerate(anchors)]


def anchor_concepts(anchors: Sequence[Sequence[AnchorSpan]], length: int) -> np.ndarray:
    """``(S, L)`` object array: the concept pinned at each position, ``""`` elsewhere."""
    _check_anchors(anchors, None, length)
    out = np.full((len(anchors), length), "", dtype=object)
    for s, spans in enumerate(anchors):
        for a in spans:
            out[s, a.start : a.end] = a.concept
    return out
