"""One event's live view while it samples, for the Dish and Compare tabs: the flip map redrawn as the
steps arrive and sample 0's canvas in the trajectory viewer, from the sampler's ``on_step`` stream
(each step's :class:`petri.engine.base.LiveStep`: raw argmax, canvas and accept mask ``(S, L)``, the
samples that stop after it ``(S,)``).

:class:`LiveDish` reads the event's layouts and pinned mask from its plan (the
:class:`~petri.core.plan.PlannedEvent` the sampler samples: nothing is laid out again), counts the
flips so far (:class:`petri.web.ui.views.LiveFlips`) and draws them
(:func:`petri.study.figures.plots.flip_heatmap`); :func:`throttled` thins a :func:`petri.web.ui.live.stream`
to at most one redraw every ``redraw_s`` while every step is still counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from petri.core.plan import PlannedEvent
from petri.study.figures.anchor_marks import aggregate_anchor_boxes
from petri.study.figures.plots import flip_heatmap, token_texts
from petri.web.ui.views import LiveFlips, TokenText, concept_colors
from petri.web.ui.widgets.trajectory import TrajectoryView

if TYPE_CHECKING:
    from petri.engine.base import SamplingModel

#: Redraw a live view at most this often (seconds).
LIVE_REDRAW_S = 0.25


def throttled(events: Iterator[tuple[str, Any]], take: Callable[[Any], None],
              redraw_s: float | None = None) -> Iterator[tuple[str, Any]]:
    """From ``stream(..., idle=True)``: ``take(payload)`` for every ``("progress", payload)`` at once;
    yields ``("draw", payload)`` for the newest payload at most once every ``redraw_s`` (default
    :data:`LIVE_REDRAW_S`; one held back is drawn at the next ``"idle"``: steps come faster than
    that), then ``("done", result)``."""
    redraw_s = LIVE_REDRAW_S if redraw_s is None else redraw_s
    last, held = 0.0, None
    for kind, payload in events:
        if kind == "done":
            yield kind, payload
            return
        if kind == "idle":
            if held is not None:
                last, drawn, held = time.monotonic(), held, None
                yield "draw", drawn
            continue
        take(payload)
        held = payload
        now = time.monotonic()
        if now - last >= redraw_s:
            last, held = now, None
            yield "draw", payload


def title_at_top(fig: go.Figure) -> go.Figure:
    """``fig`` (a flip map) with its title at the figure's top, not centred in the top margin, where
    it met the top row of anchor labels on a phone (plotly anchors a two-line title's top one line too
    high: the pad makes up for it). Returns ``fig``."""
    return fig.update_layout(title={"yref": "container", "y": 1, "yanchor": "top", "pad": {"t": 20}})


class LiveDish:
    """One event's flip counts while it samples and the views drawn from them."""

    def __init__(self, lm: SamplingModel, tokens: TokenText, planned: PlannedEvent):
        self.layouts = planned.layouts
        self.pinned = planned.pinned  # (S, L) bool, as every step's LiveStep carries it
        self.colors = concept_colors(planned.dish.concepts)
        self.flips = LiveFlips(self.pinned)
        self.tokens = tokens
        self.n_samples = len(planned.layouts)
        self.family, self.mask_id = lm.family, getattr(lm, "mask_token_id", None)

    def add(self, step) -> None:
        """One :class:`~petri.engine.base.LiveStep`."""
        self.flips.add(step)

    def heatmap(self, index: int, heading: str = "") -> go.Figure:
        """The flip map so far (``index``: the newest step's, from 0), titled "flips while sampling —
        step ``index``", under ``heading`` (an event's label, a cancelled run) on a line of its own
        when given: on one line, "run … · cancelled: flips while sampling — step 12" ran past a
        420 px screen's figure."""
        title = f"flips while sampling — step {index}"  # counted from 0, as the viewer and the y axis
        return title_at_top(flip_heatmap(
            self.flips.counts(), n_samples=self.n_samples, anchors=aggregate_anchor_boxes(self.layouts),
            pinned=self.pinned.all(axis=0), blank_pinned=True, tokens=token_texts(self.tokens, self.flips.token_ids()),
            colors=self.colors, title=f"{heading}<br>{title}" if heading else title,
        ))

    def trajectory(self, view: TrajectoryView) -> dict:
        """``view``'s live value: sample 0's record so far, by the view's component name."""
        flips = self.flips
        return {view.name("view"): view.live(flips.token_ids(), self.layouts[0], self.pinned[0], self.colors,
                                             canvas=flips.canvas_ids(), accepted=flips.accepted_rows(),
                                             family=self.family, mask_id=self.mask_id)}
