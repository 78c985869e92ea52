"""The stored denoising record, step by step (numpy / pandas only): what the trajectory viewer, the
whole-trajectory figure, the animation and the ``steps`` table read.

Everything comes from a stored :class:`~petri.core.trajectory.Trajectory` (nothing is resampled).
Token text needs the tokenizer, which lives above this layer: callers pass ``decode``, a callable
``token id → str`` (e.g. :class:`petri.web.ui.views.TokenText`); it is called once per distinct id.

**Confidence** is ``exp(-entropy)``: the record holds the entropy ``H`` (nats) of the distribution the
sampler accepts from, not the argmax token's probability, and ``exp(-H)`` is one over the effective
number of candidate tokens (1.0 for a certain position, ``1/k`` for a uniform choice among ``k``).
Every view that colours by confidence says so in its legend.

Shapes as in :class:`~petri.core.trajectory.Trajectory`: ``S`` samples, ``T`` steps, ``L`` positions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from petri.core.trajectory import UNIFORM_FAMILY, Trajectory
from petri.measure.metrics import anchor_concepts, commit_steps, flip_grid

#: The per-step table's columns, in order (one row per sample × step run × position).
STEP_COLUMNS = ["sample", "step", "position", "token_id", "token_text", "entropy", "accepted", "canvas_id",
                "canvas_text", "anchor"]
#: What the legends say the colour means.
CONFIDENCE_LEGEND = "confidence = exp(−entropy): 1 = certain, 1/k = a uniform choice among k tokens"

Decode = Callable[[int], str]


def confidence(entropy) -> np.ndarray:
    """``exp(-entropy)`` of an entropy array (nats, any shape) → float array of that shape in (0, 1];
    NaN (padding) stays NaN."""
    return np.exp(-np.asarray(entropy, dtype=float))


def visible_text(text: str) -> str:
    """A token's text as the views draw it, nothing invisible: newline ``↵``, tab ``⇥``, a space ``␣``
    where the token is only spaces, ``∅`` for an empty string (special tokens keep their ``<name>``)."""
    shown = text.replace("\r", "␍").replace("\n", "↵").replace("\t", "⇥")
    if not shown:
        return "∅"
    return "␣" * len(shown) if not shown.strip() else shown


def decode_ids(ids, decode: Decode) -> np.ndarray:
    """Token ids (any shape, int) → object array of their texts, ``decode`` called once per distinct id."""
    ids = np.asarray(ids)
    unique, inverse = np.unique(ids, return_inverse=True)
    texts = np.array([decode(int(i)) for i in unique] + [""], dtype=object)[:-1]
    return texts[inverse.reshape(ids.shape)]


def _sample(traj: Trajectory, sample: int) -> int:
    if not 0 <= int(sample) < traj.n_samples:
        raise ValueError(f"sample: must lie in 0..{traj.n_samples - 1}, got {sample}")
    return int(sample)


def steps_table(traj: Trajectory, decode: Decode) -> pd.DataFrame:
    """One row per (sample, step, position) of the steps each sample ran (padding left out), columns
    :data:`STEP_COLUMNS`: the raw argmax ``token_id`` and its ``token_text``, the ``entropy`` (nats),
    whether the sampler ``accepted`` the position at that step, the token on the canvas after the
    step (``canvas_id``, ``canvas_text``: :attr:`Trajectory.canvas`; -1 and ``""`` for runs stored
    before it was recorded), and the ``anchor`` concept pinned there (``""`` off anchors). Rows are
    ordered by sample, step, position."""
    n, t_max, length = traj.argmax.shape
    ran = np.arange(t_max)[None, :] < traj.steps[:, None]  # (S, T)
    s_idx, t_idx = np.nonzero(ran)
    ids = traj.argmax[s_idx, t_idx].ravel()
    canvas = traj.canvas[s_idx, t_idx].ravel() if traj.canvas is not None else np.full(ids.shape, -1)
    canvas_text = decode_ids(canvas, decode) if traj.canvas is not None else np.full(ids.shape, "", dtype=object)
    concepts = anchor_concepts(traj.anchors, length)
    return pd.DataFrame({
        "sample": np.repeat(s_idx, length),
        "step": np.repeat(t_idx, length),
        "position": np.tile(np.arange(length), len(s_idx)),
        "token_id": ids.astype(np.int64),
        "token_text": decode_ids(ids, decode),
        "entropy": traj.entropy[s_idx, t_idx].ravel().astype(float),
        "accepted": traj.accepted[s_idx, t_idx].ravel(),
        "canvas_id": canvas.astype(np.int64),
        "canvas_text": canvas_text,
        "anchor": concepts[s_idx].ravel(),
    }, columns=STEP_COLUMNS)


def _texts(ids_arrays, decode: Decode, special: Callable[[int], bool] | None) -> tuple[dict, list]:
    """``{str(id): visible text}`` for every id (≥ 0) in ``ids_arrays`` and the special ones among them."""
    unique = sorted({int(i) for a in ids_arrays if a is not None for i in np.unique(np.asarray(a)) if i >= 0})
    return ({str(i): visible_text(decode(i)) for i in unique},
            [i for i in unique if special is not None and special(i)])


def sample_record(traj: Trajectory, sample: int, decode: Decode, special: Callable[[int], bool] | None = None) -> dict:
    """Everything the viewer needs to scrub one sample's steps without asking again (plain JSON types):

    ``ids`` / ``canvas`` / ``conf`` / ``accepted`` / ``flipped``: ``steps × L`` lists (raw argmax,
    the canvas after the step (:attr:`Trajectory.canvas`; ``None`` for runs stored before it was
    recorded), confidence rounded to 3 places, accepted and flipped-at-this-step as 0/1; flips as
    :func:`petri.measure.metrics.flip_grid`, free positions only); ``final``: the ``L`` returned
    tokens (the final text); ``family`` and ``mask_id`` (:attr:`Trajectory.family`); ``texts``:
    ``{str(id): text}`` for every id used (:func:`visible_text`); ``special``: the ids among them
    that are special tokens; ``anchor``: ``L`` concepts (``""`` off anchors); ``commit``: ``L`` commit
    steps (:func:`petri.measure.metrics.commit_steps`); ``steps``: steps the sample ran."""
    s = _sample(traj, sample)
    n_steps = int(traj.steps[s])
    ids = traj.argmax[s, :n_steps]
    canvas = None if traj.canvas is None else traj.canvas[s, :n_steps]
    flips = flip_grid(traj.argmax[s : s + 1], traj.steps[s : s + 1], traj.anchor_mask[s : s + 1])[0, :n_steps]
    texts, specials = _texts([ids, canvas, traj.final_ids[s]], decode, special)
    return {
        "sample": s,
        "n_samples": traj.n_samples,
        "steps": n_steps,
        "length": traj.canvas_length,
        "family": traj.family,
        "mask_id": traj.mask_id,
        "ids": ids.tolist(),
        "canvas": None if canvas is None else canvas.tolist(),
        "final": traj.final_ids[s].tolist(),
        "conf": np.round(confidence(traj.entropy[s, :n_steps]), 3).tolist(),
        "accepted": traj.accepted[s, :n_steps].astype(int).tolist(),
        "flipped": flips.astype(int).tolist(),
        "texts": texts,
        "special": specials,
        "anchor": anchor_concepts(traj.anchors, traj.canvas_length)[s].tolist(),
        "commit": commit_steps(traj.argmax[s : s + 1], traj.steps[s : s + 1])[0].tolist(),
    }


def live_record(ids, anchor_row, pinned_row, decode: Decode, special: Callable[[int], bool] | None = None, *,
                canvas=None, accepted=None, family: str = UNIFORM_FAMILY, mask_id: int | None = None) -> dict:
    """The viewer's record while a dish samples, from the per-step stream
    (:class:`petri.engine.base.LiveStep`): ``ids`` ``(T, L)`` one sample's raw argmax so far (rows of
    -1 once it stopped are cut), ``canvas`` and ``accepted`` ``(T, L)`` its canvas and accept mask
    (``None``: not streamed), ``anchor_row`` ``(L,)`` concepts (``""`` off anchors), ``pinned_row``
    ``(L,)`` bool. Keys as :func:`sample_record`; ``conf`` is None (not streamed), ``final`` None
    (the run has not returned), ``commit`` the last flip so far."""
    ids = np.asarray(ids)
    n_steps = int((ids >= 0).all(axis=1).sum()) if ids.size else 0
    ids = ids[:n_steps] if ids.size else ids.reshape(0, len(anchor_row))
    canvas = None if canvas is None else np.asarray(canvas)[:n_steps]
    accepted = None if accepted is None else np.asarray(accepted, dtype=bool)[:n_steps]
    if n_steps:
        flips = flip_grid(ids[None], np.array([n_steps]), np.asarray(pinned_row, dtype=bool)[None])[0]
        commit = commit_steps(ids[None], np.array([n_steps]))[0].tolist()
    else:
        flips, commit = np.zeros((0, len(anchor_row)), dtype=bool), [0] * len(anchor_row)
    texts, specials = _texts([ids, canvas], decode, special)
    return {
        "sample": 0, "n_samples": 1, "steps": n_steps, "length": len(anchor_row), "family": family, "mask_id": mask_id,
        "ids": ids.tolist(), "canvas": None if canvas is None else canvas.tolist(), "final": None,
        "conf": None, "accepted": None if accepted is None else accepted.astype(int).tolist(),
        "flipped": flips.astype(int).tolist(), "texts": texts, "special": specials,
        "anchor": [str(c) for c in anchor_row], "commit": commit,
    }


def frame(traj: Trajectory, sample: int, step: int, decode: Decode) -> pd.DataFrame:
    """The canvas of one (sample, step): one row per position with ``token_id``, ``token_text``,
    ``confidence``, ``accepted``, ``flipped`` (at this step, free positions only) and ``anchor``."""
    s = _sample(traj, sample)
    if not 0 <= int(step) < int(traj.steps[s]):
        raise ValueError(f"step: sample {s} ran steps 0..{int(traj.steps[s]) - 1}, got {step}")
    t = int(step)
    ids = traj.argmax[s, t]
    flips = flip_grid(traj.argmax[s : s + 1], traj.steps[s : s + 1], traj.anchor_mask[s : s + 1])[0, t]
    return pd.DataFrame({
        "position": np.arange(traj.canvas_length),
        "token_id": ids.astype(np.int64),
        "token_text": decode_ids(ids, decode),
        "confidence": confidence(traj.entropy[s, t]),
        "accepted": traj.accepted[s, t],
        "flipped": flips,
        "anchor": anchor_concepts(traj.anchors, traj.canvas_length)[s],
    })


def step_curves(traj: Trajectory) -> pd.DataFrame:
    """Per (sample, step run): ``mean_entropy_free`` (mean entropy over the free positions, nats),
    ``accepted_free`` (free positions the sampler accepted at that step) and ``flips`` (free positions
    whose argmax flipped at that step, 0 at step 0)."""
    n, t_max, _ = traj.argmax.shape
    free = ~traj.anchor_mask[:, None, :]  # (S, 1, L)
    n_free = np.maximum(free.sum(axis=2), 1)  # (S, 1)
    entropy = np.where(free, traj.entropy, 0.0).sum(axis=2) / n_free
    accepted = (traj.accepted & free).sum(axis=2)
    flips = flip_grid(traj.argmax, traj.steps, traj.anchor_mask).sum(axis=2)
    ran = np.arange(t_max)[None, :] < traj.steps[:, None]
    s_idx, t_idx = np.nonzero(ran)
    return pd.DataFrame({
        "sample": s_idx, "step": t_idx, "mean_entropy_free": entropy[s_idx, t_idx].astype(float),
        "accepted_free": accepted[s_idx, t_idx].astype(int), "flips": flips[s_idx, t_idx].astype(int),
    })
