"""The whole trajectory of one sample at a glance (plotly; never imports torch).

(1) :func:`trajectory_figure`: every step of one sample as a row of tokens (the DiffusionGemma technical
report's layout, step 0 on top), each cell coloured by confidence (``exp(-entropy)``, see
:mod:`petri.measure.replay`), what the viewer shows (the canvas, ``[MASK]`` cells grey on a masked-diffusion
canvas, or the raw argmax) and a last row that is the returned canvas, renoised cells faded, the cells whose argmax flipped at that step
outlined with a dashed black line (a form no concept colour takes), each position's commit step marked with a black bar, anchors outlined
in their concept colours (``colors``: the chips' and heatmap boxes' colours, :func:`petri.web.ui.views.concept_colors`).
(2) :func:`step_curves_figure`: per step, the mean entropy of the free positions, the free tokens
accepted and the flips; each sample a thin line, the mean over the samples still running a thick one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from petri.core.trajectory import MASKED_FAMILY, Trajectory
from petri.measure.replay import CONFIDENCE_LEGEND, confidence, decode_ids, sample_record, step_curves, visible_text
from petri.study.figures.anchor_marks import mark_anchors

#: Confidence colour scale, light (unsure) to dark (certain), shared by the figure and the animation.
CONFIDENCE_SCALE: list[list] = [[0.0, "#f7fbff"], [0.5, "#6baed6"], [1.0, "#08306b"]]
#: A flip's outline: dashed black, as in the viewer (a concept's box is a solid line in its colour).
FLIP_OUTLINE = {"color": "black", "width": 1.5, "dash": "dash"}
#: A cell at least this wide (px) shows its token's text, at :data:`CELL_FONT_PX` (never smaller).
TEXT_CELL_PX = 24
CELL_FONT_PX = 10
#: The cell width the UI draws the figure at: readable text; a wide canvas scrolls sideways.
READABLE_CELL_PX = 44


def cell_outlines(cells, inset: float = 0.42) -> str:
    """One SVG path outlining every cell of ``cells`` ``(n, 2)`` (step, position) pairs, as a square
    of half-side ``inset`` (data units) around each: a single shape however many cells flip."""
    return "".join(f"M{x - inset},{y - inset}H{x + inset}V{y + inset}H{x - inset}Z" for y, x in np.asarray(cells).reshape(-1, 2))


#: What the figure's cells can show, as the viewer's choice (:func:`petri.web.ui.widgets.trajectory.view_modes`):
#: the canvas after each step, the canvas with the raw argmax inside cells still masked (masked
#: diffusion), or the raw argmax.
FIGURE_MODES = ("canvas", "peek", "argmax")
MASK_TEXT = "[MASK]"
#: A still-masked cell's colour (the viewer's grey).
MASK_FILL = "#e5e7eb"
#: Width of one character of cell text (px, at :data:`CELL_FONT_PX`): generous for plotly's sans-serif.
CHAR_PX = 0.62 * CELL_FONT_PX


def shown_mode(traj: Trajectory, mode: str) -> str:
    """The mode (:data:`FIGURE_MODES`) a figure of ``traj`` shows when ``mode`` is asked for: the raw
    argmax for a run stored before the canvas was recorded, the canvas for ``peek`` on a uniform-
    diffusion run (nothing is masked there). Raises ``ValueError`` naming ``mode`` when it is none."""
    if mode not in FIGURE_MODES:
        raise ValueError(f"mode: must be one of {', '.join(FIGURE_MODES)}, got {mode!r}")
    if traj.canvas is None:
        return "argmax"
    return "canvas" if mode == "peek" and traj.family != MASKED_FAMILY else mode


def figure_rows(traj: Trajectory, sample: int, mode: str = "canvas") -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """What the figure's rows show for sample ``sample``: ``ids`` ``(n_steps + 1, L)`` (each step's
    row, then the returned canvas, the final text), ``masked`` and ``peek`` ``(n_steps + 1, L)``
    bool (a cell still ``[MASK]`` on a masked-diffusion canvas; one whose shown id is the raw argmax
    under that mask), and the mode shown (``"argmax"`` where ``mode`` asks for a canvas the run did
    not record). Anchors always show their own token (the viewer's rule); ``mode`` one of
    :data:`FIGURE_MODES`."""
    mode = shown_mode(traj, mode)
    s = int(sample)
    n_steps = int(traj.steps[s])
    argmax = traj.argmax[s, :n_steps]
    ids = argmax.copy() if mode == "argmax" else cast(np.ndarray, traj.canvas)[s, :n_steps].copy()  # shown_mode: a canvas
    anchors = traj.anchor_mask[s]
    ids[:, anchors] = traj.final_ids[s][anchors]
    masked = np.zeros(ids.shape, dtype=bool)
    if mode != "argmax" and traj.family == MASKED_FAMILY and traj.mask_id is not None:
        masked = (ids == traj.mask_id) & ~anchors[None]
    peek = masked if mode == "peek" else np.zeros(ids.shape, dtype=bool)
    ids = np.where(peek, argmax, ids)
    last = np.zeros((1, ids.shape[1]), dtype=bool)
    return (np.vstack([ids, traj.final_ids[s][None]]), np.vstack([masked & ~peek, last]), np.vstack([peek, last]),
            mode)


def _escape(text: str) -> str:
    """A token's text for a plotly label (its own ``<``/``>`` are not tags)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def figure_caption(family: str, mode: str) -> str:
    """The figure's subtitle: what the cells show and what each mark means, for the family and mode."""
    if mode == "argmax":
        shown = "cells: the model's raw argmax at each step, anchors their own token"
    elif family == MASKED_FAMILY:
        shown = ("cells: the canvas after each step; grey [MASK] = still masked" +
                 ("; italics = the raw argmax under a mask" if mode == "peek" else ""))
    else:
        shown = "cells: the canvas after each step (what the next step reads)"
    marks = ("dotted outline = unmasked at this step" if family == MASKED_FAMILY
             else "faded = renoised (a fresh random token the next step reads)")
    return f"{shown}; last row: the returned canvas (the final text)<br>{CONFIDENCE_LEGEND}; {marks}"


def trajectory_figure(traj: Trajectory, sample: int, decode: Callable[[int], str], *,
                      colors: dict[str, str] | None = None, cell_px: float = 40, mode: str = "canvas") -> go.Figure:
    """Steps × positions of sample ``sample`` as the viewer shows them (``mode``: :func:`figure_rows`),
    then a last row ``result``, the returned canvas (the final text). Each cell holds its whole token
    (the cells are widened to the longest text; never cut), colour = confidence, a still-masked cell
    grey with ``[MASK]`` (masked diffusion), renoised cells faded (uniform diffusion) or unmasked ones
    outlined dotted (masked diffusion), dashed black outline = the argmax flipped at that step,
    black bar = commit step, anchors outlined in their concept colours. ``cell_px``: the narrowest a
    cell is drawn (the figure is ``cell × L + 160`` px wide); text is left out under :data:`TEXT_CELL_PX`."""
    rec = sample_record(traj, sample, decode)
    ids, masked, peek, shown_mode = figure_rows(traj, rec["sample"], mode)
    n_steps, length = ids.shape[0] - 1, ids.shape[1]
    conf = confidence(traj.entropy[rec["sample"], :n_steps])
    conf = np.vstack([conf, conf[-1:]])  # the returned canvas: confidence at the last step
    accepted = np.vstack([np.asarray(rec["accepted"], dtype=bool), np.ones((1, length), dtype=bool)])
    masked_family = traj.family == MASKED_FAMILY
    faded = ~accepted & (not masked_family)
    grey = masked | peek  # cells still masked on the canvas: grey, whatever the model's confidence
    z = np.where(grey, np.nan, np.where(faded, conf * 0.35, conf))  # renoised cells faded toward white
    visible = np.vectorize(visible_text, otypes=[object])(decode_ids(ids, decode))
    visible[masked] = MASK_TEXT
    cell_px = max(cell_px, max(len(t) for t in visible.ravel()) * CHAR_PX + 8)  # the longest token fits whole
    texts = np.vectorize(_escape, otypes=[object])(visible)
    texts[peek] = np.vectorize(lambda t: f"<i>{t}</i>", otypes=[object])(texts[peek])
    hover_text = np.where(masked, MASK_TEXT, decode_ids(ids, lambda i: repr(decode(i))[1:-1]))
    state = np.where(grey, "still masked", np.where(faded, "renoised", "committed" if masked_family else "accepted"))
    state[-1] = "the returned canvas"
    custom = np.dstack([hover_text, ids, np.round(conf, 3), state])
    rows = np.arange(n_steps + 1)
    template = "%{text}" if cell_px >= TEXT_CELL_PX else ""
    hover = ("step %{y}, position %{x}: '%{customdata[0]}' (id %{customdata[1]})<br>confidence "
             "%{customdata[2]}, %{customdata[3]}<extra></extra>")
    fig = go.Figure()
    if grey.any():  # still-masked cells: grey, their text [MASK] (or the argmax under it, in italics)
        fig.add_trace(go.Heatmap(z=np.where(grey, 0.0, np.nan), x=np.arange(length), y=rows, showscale=False,
                                 colorscale=[[0, MASK_FILL], [1, MASK_FILL]], xgap=1, ygap=1, name="still masked",
                                 text=np.where(grey, texts, ""), texttemplate=template,
                                 textfont={"size": CELL_FONT_PX, "color": "#4b5563"}, customdata=custom, hovertemplate=hover))
    fig.add_trace(go.Heatmap(
        z=z, x=np.arange(length), y=rows, zmin=0, zmax=1, colorscale=CONFIDENCE_SCALE,
        text=np.where(grey, "", texts), texttemplate=template, textfont={"size": CELL_FONT_PX},
        customdata=custom, xgap=1, ygap=1, name="tokens", hovertemplate=hover,
        colorbar={"title": {"text": "confidence<br>exp(−entropy)", "side": "top"}, "thickness": 12},
    ))
    flips = np.argwhere(np.asarray(rec["flipped"], dtype=bool))
    if len(flips):
        fig.add_shape(type="path", path=cell_outlines(flips), line=FLIP_OUTLINE, layer="above",
                      name="flipped at this step", showlegend=True)
    unmasked: Any = np.argwhere(accepted[:-1] & ~traj.anchor_mask[rec["sample"]][None]) if masked_family else []
    if len(unmasked):
        fig.add_shape(type="path", path=cell_outlines(unmasked, 0.36), line={"color": "black", "width": 1.5, "dash": "dot"},
                      layer="above", name="unmasked at this step", showlegend=True)
    commit = np.asarray(rec["commit"])
    fig.add_trace(go.Scatter(x=np.arange(length), y=commit + 0.42, mode="markers", name="commit step (bar under the row)",
                             marker={"symbol": "line-ew-open", "size": 0.85 * cell_px, "color": "black", "line": {"width": 3}},
                             customdata=commit, hovertemplate="position %{x} commits at step %{customdata}<extra></extra>"))
    mark_anchors(fig, traj.anchors[rec["sample"]], traj.anchor_mask[rec["sample"]], outline=True, colors=colors)
    what = "the raw argmax" if shown_mode == "argmax" else "the canvas"
    fig.update_layout(
        title=f"sample {rec['sample']}: every step ({n_steps}) as a row of tokens: {what}<br><sup>"
              f"{figure_caption(traj.family, shown_mode)}</sup>",
        xaxis_title="canvas position", yaxis_title="step", template="plotly_white",
        yaxis={"autorange": "reversed", "tickmode": "array", "tickvals": [*range(0, n_steps, 5), n_steps],
               "ticktext": [*map(str, range(0, n_steps, 5)), "result"]},
        width=max(900, cell_px * length + 160), height=max(360, 26 * (n_steps + 1) + 190),
        legend={"orientation": "h", "y": -0.12}, margin={"t": 110}, title_font_size=13,
        meta={"mode": shown_mode, "family": traj.family, "cell_px": cell_px},
    )
    return fig


def step_curves_figure(traj: Trajectory, sample: int | None = None) -> go.Figure:
    """Per-step curves (:func:`petri.measure.replay.step_curves`) of every sample (thin grey, ``sample`` in
    blue when given) and their mean over the samples still running at each step (thick black)."""
    curves = step_curves(traj)
    panels = [("mean_entropy_free", "mean entropy of free positions (nats)"),
              ("accepted_free", "free tokens accepted"), ("flips", "flips")]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[title for _, title in panels])
    mean = curves.groupby("step").mean(numeric_only=True).reset_index()
    for row, (column, _) in enumerate(panels, start=1):
        for s, part in curves.groupby("sample"):
            chosen = sample is not None and s == sample
            fig.add_trace(go.Scatter(
                x=part["step"], y=part[column], mode="lines", name=f"sample {s}", legendgroup=f"s{s}",
                showlegend=chosen and row == 1, line={"width": 2.5 if chosen else 1,
                                                     "color": "#1f77b4" if chosen else "rgba(120,120,120,0.35)"},
                hovertemplate=f"sample {s}, step %{{x}}: %{{y:.3f}}<extra></extra>"), row=row, col=1)
        fig.add_trace(go.Scatter(x=mean["step"], y=mean[column], mode="lines", name="mean over samples",
                                 legendgroup="mean", showlegend=row == 1, line={"width": 3, "color": "black"},
                                 hovertemplate="mean, step %{x}: %{y:.3f}<extra></extra>"), row=row, col=1)
    fig.update_xaxes(title_text="step", row=3, col=1)
    fig.update_layout(title=f"per step, {traj.n_samples} samples", template="plotly_white", width=520, height=640,
                      legend={"orientation": "h", "y": -0.12}, title_font_size=13)
    return fig
