"""The whole trajectory of one sample at a glance (plotly; never imports torch).

(1) :func:`trajectory_figure`: every step of one sample as a row of tokens (the DiffusionGemma technical
report's layout, step 0 on top), each cell coloured by confidence (``exp(-entropy)``, see
:mod:`petri.measure.replay`), renoised (not accepted) cells faded, the cells whose argmax flipped at that step
outlined with a dashed black line (a form no concept colour takes), each position's commit step marked with a black bar, anchors outlined in their
concept colours (``colors``: the chips' and heatmap boxes' colours, :func:`petri.web.ui.views.concept_colors`).
(2) :func:`step_curves_figure`: per step, the mean entropy of the free positions, the free tokens
accepted and the flips; each sample a thin line, the mean over the samples still running a thick one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from petri.measure.replay import CONFIDENCE_LEGEND, confidence, decode_ids, sample_record, step_curves, visible_text
from petri.study.anchor_marks import mark_anchors
from petri.core.trajectory import Trajectory

#: Confidence colour scale, light (unsure) to dark (certain), shared by the figure and the animation.
CONFIDENCE_SCALE = [[0.0, "#f7fbff"], [0.5, "#6baed6"], [1.0, "#08306b"]]
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


def trajectory_figure(traj: Trajectory, sample: int, decode: Callable[[int], str], *,
                      colors: dict[str, str] | None = None, max_chars: int = 8, cell_px: float = 40) -> go.Figure:
    """Steps × positions of sample ``sample``: token text in each cell (cut to ``max_chars`` and to what
    the cell holds, at
    :data:`CELL_FONT_PX`; left out when cells are under :data:`TEXT_CELL_PX`), colour = confidence,
    faded = not accepted, dashed black outline = flipped at that step, black bar = commit step.
    ``cell_px``: a cell's width, which sizes the figure (``cell_px`` × L + 160 px wide) and marks."""
    rec = sample_record(traj, sample, decode)
    ids = np.asarray(rec["ids"])
    n_steps, length = ids.shape
    conf = confidence(traj.entropy[rec["sample"], :n_steps])
    accepted = np.asarray(rec["accepted"], dtype=bool)
    z = np.where(accepted, conf, conf * 0.35)  # renoised cells faded toward white
    fits = max(1, int((cell_px - 4) // (0.62 * CELL_FONT_PX)))  # characters a cell holds without spilling over
    texts = np.vectorize(lambda t: visible_text(t)[:min(max_chars, fits)], otypes=[object])(decode_ids(ids, decode))
    hover_text = decode_ids(ids, lambda i: repr(decode(i))[1:-1])
    custom = np.dstack([hover_text, ids, np.round(conf, 3), np.where(accepted, "accepted", "renoised")])
    fig = go.Figure(go.Heatmap(
        z=z, x=np.arange(length), y=np.arange(n_steps), zmin=0, zmax=1, colorscale=CONFIDENCE_SCALE,
        text=texts, texttemplate="%{text}" if cell_px >= TEXT_CELL_PX else "", textfont={"size": CELL_FONT_PX},
        customdata=custom, xgap=1, ygap=1,
        hovertemplate="step %{y}, position %{x}: '%{customdata[0]}' (id %{customdata[1]})<br>confidence "
                      "%{customdata[2]}, %{customdata[3]}<extra></extra>",
        colorbar={"title": {"text": "confidence<br>exp(−entropy)", "side": "top"}, "thickness": 12},
    ))
    flips = np.argwhere(np.asarray(rec["flipped"], dtype=bool))
    if len(flips):
        fig.add_shape(type="path", path=cell_outlines(flips), line=FLIP_OUTLINE, layer="above",
                      name="flipped at this step", showlegend=True)
    commit = np.asarray(rec["commit"])
    fig.add_trace(go.Scatter(x=np.arange(length), y=commit + 0.42, mode="markers", name="commit step (bar under the row)",
                             marker={"symbol": "line-ew-open", "size": 0.85 * cell_px, "color": "black", "line": {"width": 3}},
                             customdata=commit, hovertemplate="position %{x} commits at step %{customdata}<extra></extra>"))
    mark_anchors(fig, traj.anchors[rec["sample"]], traj.anchor_mask[rec["sample"]], outline=True, colors=colors)
    fig.update_layout(
        title=f"sample {rec['sample']}: every step ({n_steps}) as a row of tokens<br><sup>{CONFIDENCE_LEGEND}; "
              "faded = renoised</sup>",
        xaxis_title="canvas position", yaxis_title="step", yaxis_autorange="reversed", template="plotly_white",
        width=max(900, cell_px * length + 160), height=max(360, 26 * n_steps + 170),
        legend={"orientation": "h", "y": -0.12}, margin={"t": 90}, title_font_size=13,
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
