"""The UI's pure helpers (no Gradio): parsing the concept field, colours, token text, the live flip
count, the canvas strip and the highlighted final text, and one-line error messages. The flip
figures themselves are :func:`petri.study.plots.flip_heatmap`; flips are :mod:`petri.metrics`'."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import plotly.graph_objects as go
from pydantic import ValidationError

from petri.metrics import anchor_concepts, step_flips
from petri.trajectory import Trajectory
from petri.web.errors import FieldError
from petri.web.requests import LayoutPreview

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
PREFIX_LABEL = "pinned prefix"


def parse_concepts(text: str) -> list[str]:
    """``"order, inventory , person"`` → ``["order", "inventory", "person"]`` (empty entries kept
    as ``""`` so validation can name them)."""
    if not text or not text.strip():
        return []
    return [c.strip() for c in text.split(",")]


def concept_colors(concepts: Sequence[str]) -> dict[str, str]:
    """A colour per concept, assigned in sorted order so every view of a dish agrees."""
    return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(sorted(set(concepts)))}


class TokenText:
    """The text of single token ids (cached), for hovers and the highlighted final text; a callable
    ``id → str`` as :func:`petri.study.plots.token_texts` takes it."""

    def __init__(self, tokenizer):
        self._decode = lru_cache(maxsize=65536)(lambda i: tokenizer.decode([i]) if i >= 0 else "")

    def __call__(self, token_id: int) -> str:
        return self._decode(int(token_id))


class LiveFlips:
    """The flip map while a dish samples, from the ``on_step`` stream: per step, how many samples
    flipped at each free position (:func:`petri.metrics.step_flips` of the step against the one
    before, for the samples still running), plus sample 0's argmax for the hover. Once every step
    is in, :meth:`counts` equals ``flip_grid(argmax, steps, anchor_mask).sum(axis=0)``."""

    def __init__(self, pinned: np.ndarray):
        """``pinned`` ``(S, L)`` bool: the positions pinned in each sample (never counted)."""
        self.free = ~np.asarray(pinned, dtype=bool)
        self.rows: list[np.ndarray] = []
        self.tokens: list[np.ndarray] = []
        self.prev: np.ndarray | None = None
        self.done = np.zeros(self.free.shape[0], dtype=bool)

    def add(self, argmax: np.ndarray, finished: np.ndarray) -> None:
        """One step: ``argmax`` ``(S, L)`` and ``finished`` ``(S,)`` bool (the samples that stop after it)."""
        running = ~self.done
        if self.prev is None:
            flips = np.zeros(argmax.shape[1], dtype=int)
        else:
            flips = (step_flips(self.prev, argmax) & self.free & running[:, None]).sum(axis=0)
        self.rows.append(flips)
        self.tokens.append(np.where(running[0], argmax[0], -1))
        self.prev = argmax
        self.done = self.done | np.asarray(finished, dtype=bool)

    def counts(self) -> np.ndarray:
        """``(T, L)`` int: samples flipping per step so far and position."""
        return np.array(self.rows) if self.rows else np.zeros((0, self.free.shape[1]), dtype=int)

    def token_ids(self) -> np.ndarray:
        """``(T, L)`` int: sample 0's argmax per step so far (-1 once it stopped)."""
        return np.array(self.tokens) if self.tokens else np.zeros((0, self.free.shape[1]), dtype=int)


def canvas_strip(preview: LayoutPreview, colors: dict[str, str]) -> go.Figure:
    """The canvas as a strip: the pinned prefix in grey, each anchor as a coloured block, and the
    layout check's error (if any) as the title."""
    canvas_length, prefix = preview.canvas_length, preview.prefix
    fig = go.Figure()
    fig.add_shape(type="rect", x0=0, x1=canvas_length, y0=0, y1=1, fillcolor="#f3f4f6", line_width=1, line_color="#9ca3af")
    if prefix:
        fig.add_shape(type="rect", x0=0, x1=prefix, y0=0, y1=1, fillcolor="#d1d5db", line_width=0)
        fig.add_annotation(x=prefix / 2, y=0.5, text="prefix", showarrow=False, font=dict(size=10, color="#374151"))
    for i, span in enumerate(preview.spans):
        color = colors.get(span.concept, PALETTE[i % len(PALETTE)])
        fig.add_shape(type="rect", x0=span.start, x1=span.end, y0=0, y1=1, fillcolor=color, line_width=0, opacity=0.9)
        fig.add_annotation(
            x=(span.start + span.end) / 2, y=1.0, yanchor="bottom", text=f"<b>{span.concept}</b> @{span.start}",
            showarrow=False, font=dict(size=12, color=color),
        )
    # an invisible trace so hovering the strip tells the position
    fig.add_trace(go.Scatter(x=list(range(canvas_length)), y=[0.5] * canvas_length, mode="markers",
                             marker=dict(opacity=0), hovertemplate="position %{x}<extra></extra>", showlegend=False))
    error = preview.error
    title = f"<span style='color:#b91c1c'>{error}</span>" if error else f"canvas: {canvas_length} positions"
    fig.update_layout(
        title=dict(text=title, font=dict(size=13), x=0.01, y=0.95),
        height=150, margin=dict(l=10, r=10, t=50, b=30), plot_bgcolor="white",
        xaxis=dict(range=[-0.5, canvas_length + 0.5], title=None, showgrid=False, zeroline=False),
        yaxis=dict(range=[0, 1.6], visible=False, fixedrange=True),
    )
    return fig


def highlighted_text(traj: Trajectory, sample: int, tokens: TokenText) -> list[tuple[str, str | None]]:
    """Sample ``sample``'s final canvas, token by token, anchors labelled with their concept."""
    concepts = anchor_concepts(traj.anchors, traj.canvas_length)[sample]
    pinned = traj.anchor_mask[sample]
    out = []
    for i, token_id in enumerate(traj.final_ids[sample]):
        label = concepts[i] or (PREFIX_LABEL if pinned[i] else None)
        out.append((tokens(token_id), label or None))
    return out


def request_error_message(err: ValidationError | FieldError) -> str:
    """One line per bad field, naming it (as the API's 422 body does)."""
    if isinstance(err, FieldError):
        where = ".".join(str(p) for p in err.loc if p != "body")
        return err.msg if err.msg.startswith(where.split(".")[0] + ":") else f"{where}: {err.msg}"
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        lines.append(f"{where}: {e['msg']}")
    return "; ".join(lines)
