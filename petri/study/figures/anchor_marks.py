"""Anchor marks on a figure (plotly; never imports torch): each pinned concept's span outlined or
shaded in its colour and labelled above the plot, the labels stacked in rows where they would overlap
at the narrowest width a figure is drawn (a half-width Compare panel, a 420 px screen); for a dish whose
samples shuffle their anchors, one box per *slot* (:func:`aggregate_anchor_boxes`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go

from petri.core.trajectory import AnchorSpan

#: An anchor's colour where no concept colour is given (the canvas chips' default).
ANCHOR_COLOR = "#f4a261"


class Box(NamedTuple):
    """An outlined stretch of a figure: ``concept`` is its label, positions ``start .. end - 1``;
    ``detail``, when given, is shown on hovering the label (the whole text of a shortened one)."""

    concept: str
    start: int
    end: int
    detail: str = ""


#: A slot label's concept names beyond this many characters are cut with "…" (the whole list on hover).
SLOT_NAMES_CHARS = 14
#: The narrowest plot area a flip map is drawn in (px): a heatmap at half width or on a 420 px screen.
#: Labels above a figure are stacked in rows so that none overlaps another at this width or wider.
NARROW_PLOT_PX = 280
LABEL_ROW_PX = 18


def aggregate_anchor_boxes(anchors: Sequence[Sequence[AnchorSpan]]) -> list:
    """The anchor boxes of a figure over every sample (``anchors[s]``: sample ``s``'s spans): the
    concepts themselves when every sample pins them at the same positions, else one box per *slot*
    (the k-th anchor in canvas order), ``"slot k: a/b"`` naming the concepts the samples put there
    and covering each of their spans (a shuffled layout: sample 0's boxes would mislabel the rest);
    its hover (``detail``) says per sample which concept sat there (:func:`per_sample`)."""
    layouts = [sorted((a.start, a.end, a.concept) for a in spans) for spans in anchors]
    if not layouts or all(layout == layouts[0] for layout in layouts):
        return list(anchors[0]) if anchors else []
    boxes = []
    for k, slot in enumerate(zip(*layouts)):
        names = "/".join(dict.fromkeys(concept for _, _, concept in slot))
        short = names if len(names) <= SLOT_NAMES_CHARS else names[: SLOT_NAMES_CHARS - 1] + "…"
        boxes.append(Box(f"slot {k + 1}: {short}", min(x for x, _, _ in slot), max(y for _, y, _ in slot),
                         f"slot {k + 1}: {names}; per sample: {per_sample(concept for _, _, concept in slot)}"))
    return boxes


#: A slot label's hover lists what this many samples put there (then how many more).
SLOT_SAMPLES_LISTED = 16


def per_sample(concepts) -> str:
    """``"0 person · 1 order · …"``: the concept each sample put in a slot, in sample order (the
    first :data:`SLOT_SAMPLES_LISTED`, then how many more)."""
    names = list(concepts)
    listed = " · ".join(f"{s} {c}" for s, c in enumerate(names[:SLOT_SAMPLES_LISTED]))
    more = len(names) - SLOT_SAMPLES_LISTED
    return listed + (f" · … ({more} more samples)" if more > 0 else "")


def label_width_px(text: str, size: int) -> float:
    """A generous estimate of a label's width in px (bold sans-serif, ``size`` px): 0.62 em a character."""
    return 0.62 * size * len(text) + 4


def stack_labels(centers: Sequence[float], widths_px: Sequence[float], px_per_unit: float) -> list[int]:
    """Rows for labels above a figure so that no two in a row overlap: label ``i`` is centred at
    ``centers[i]`` (data units) and ``widths_px[i]`` wide; ``px_per_unit`` the narrowest scale the
    figure is drawn at. Each label takes the lowest row whose labels it clears (in the order of their
    centres). Returns one row (0 = lowest) per label, in the order given."""
    rows: list[list[tuple[float, float]]] = []
    placed = [0] * len(centers)
    for i in sorted(range(len(centers)), key=lambda i: centers[i]):
        half = widths_px[i] / 2 / px_per_unit
        left, right = centers[i] - half, centers[i] + half
        row = next((r for r, spans in enumerate(rows) if all(right <= a or b <= left for a, b in spans)), len(rows))
        if row == len(rows):
            rows.append([])
        rows[row].append((left, right))
        placed[i] = row
    return placed


def mark_anchors(
    fig: go.Figure, spans: Sequence[AnchorSpan | Box], pinned, *, outline: bool = False, colors: dict[str, str] | None = None
) -> int:
    """Mark each anchor span (labelled with its concept above the plot, coloured by ``colors`` or
    :data:`ANCHOR_COLOR`) and the rest of the pinned positions ``pinned`` ``(L,)`` bool (the canvas
    prefix): shaded behind bars, or outlined on top of a heatmap (``outline``). Labels that would
    overlap at :data:`NARROW_PLOT_PX` are stacked (:func:`stack_labels`). Returns the rows of labels."""
    pinned = np.asarray(pinned, dtype=bool)
    in_span = np.zeros(pinned.shape, dtype=bool)
    marks = []  # (x0, x1, colour, label, size, hover)
    for a in spans:
        in_span[a.start:a.end] = True
        marks.append((a.start - 0.5, a.end - 0.5, (colors or {}).get(a.concept, ANCHOR_COLOR), a.concept, 12,
                      getattr(a, "detail", "")))
    prefix = np.flatnonzero(pinned & ~in_span)
    if prefix.size:
        marks.append((prefix.min() - 0.5, prefix.max() + 0.5, "#6c757d", "pinned prefix", 10, ""))
    px_per_unit = NARROW_PLOT_PX / max(1, pinned.shape[0])
    rows = stack_labels([(x0 + x1) / 2 for x0, x1, *_ in marks],
                        [label_width_px(label, size) for *_, label, size, _ in marks], px_per_unit)
    for (x0, x1, color, label, size, hover), row in zip(marks, rows):
        if outline:
            fig.add_vrect(x0=x0, x1=x1, fillcolor="rgba(0,0,0,0)", line_width=2.5, line_color=color, layer="above")
        else:
            fig.add_vrect(x0=x0, x1=x1, fillcolor=color, opacity=0.25, line_width=1.5, line_color=color, layer="below")
        text = f"<b>{label}</b>" if size >= 12 else label
        fig.add_annotation(x=(x0 + x1) / 2, y=1.0, yref="paper", yanchor="bottom", yshift=row * LABEL_ROW_PX, text=text,
                           showarrow=False, font={"color": color, "size": size}, hovertext=hover or None,
                           name="anchor label")
    return max(rows, default=-1) + 1


def top_margin(label_rows: int) -> int:
    """A flip map's top margin (px): room for a two-line title and ``label_rows`` rows of labels."""
    return 62 + LABEL_ROW_PX * max(1, label_rows)
