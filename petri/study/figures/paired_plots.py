"""The paired study's figure (plotly; never imports torch): one line per event from the reference
condition to each other condition (a slope chart), so a within-event effect is seen as most lines
rising (or falling), with the mean over events drawn thick. A dose study puts the conditions at
their doses on a numeric axis."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from petri.study.figures.plots import _wrap, tag_run

__all__ = ["paired_slope_figure", "DIRECTION_COLORS"]

DIRECTION_COLORS = {"up": "#c2410c", "down": "#1d4ed8", "flat": "#9ca3af"}
"""Line colours by the sign of last condition - reference: higher, lower, equal."""


def paired_slope_figure(events: pd.DataFrame, conditions: Sequence[str], *, value: str = "instability",
                        doses: dict[str, float] | None = None, title: str = "", model_id: str = "",
                        provisional: str = "", run_id: str = "") -> go.Figure:
    """``events``: one row per (event, condition) with ``event_id``, ``condition``, ``value`` (and
    ``event``, the text, for the hover), as a paired study's events table. One line per event over
    ``conditions`` (study order, the first the reference), coloured by whether the last condition is
    above, below or equal to the reference; a thick black line joins the means over events. ``title``:
    the paired test's summary; ``provisional`` (while a study runs) heads it."""
    wide = events.pivot_table(index="event_id", columns="condition", values=value, aggfunc="first")
    wide = wide.reindex(columns=list(conditions))
    texts = events.drop_duplicates("event_id").set_index("event_id").get("event", pd.Series(dtype=str))
    xs = [doses[c] for c in conditions] if doses else list(conditions)
    fig = go.Figure()
    counts = {"up": 0, "down": 0, "flat": 0}
    for event_id, row in wide.iterrows():
        ref, last = row.iloc[0], row.iloc[-1]
        way = "flat" if not (pd.notna(ref) and pd.notna(last)) or last == ref else ("up" if last > ref else "down")
        counts[way] += 1
        fig.add_trace(go.Scatter(
            x=xs, y=row.to_numpy(float), mode="lines+markers", line={"color": DIRECTION_COLORS[way], "width": 1.2},
            marker={"size": 5}, opacity=0.75, showlegend=False, name=str(event_id),
            hovertemplate=f"{event_id}: {str(texts.get(event_id, ''))[:80]}<br>%{{x}}: %{{y:.4f}}<extra></extra>"))
    fig.add_trace(go.Scatter(x=xs, y=wide.mean(axis=0).to_numpy(float), mode="lines+markers", name="mean over events",
                             line={"color": "black", "width": 4}, marker={"size": 9}))
    last = conditions[-1]
    for way, label in (("up", f"higher under {last}"), ("down", f"lower under {last}"), ("flat", "equal")):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line={"color": DIRECTION_COLORS[way]},
                                 name=f"{label}: {counts[way]} events"))
    head = title or f"{value} per event under each condition (one line per event)"
    text = _wrap(head) + (f"<br><span style='font-size:11px'>model {model_id}</span>" if model_id else "")
    if provisional:
        text = f"<span style='color:#b45309'>{provisional}</span><br>{text}"
    fig.update_layout(title={"text": f"<b>{text}</b>", "font": {"size": 13}, "x": 0.01, "xanchor": "left"},
                      template="plotly_white", width=900, height=600, margin={"t": 120, "b": 60, "l": 70, "r": 30},
                      xaxis_title="dose" if doses else f"condition ({conditions[0]} = reference)",
                      yaxis_title=f"{value} (event mean over templates and samples)")
    return tag_run(fig, run_id)
