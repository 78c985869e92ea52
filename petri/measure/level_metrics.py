"""The segment, pair and event metrics, declared once (no torch); the per-sample ones are
:mod:`petri.measure.sample_metrics`'.

A metric of one event is a :class:`LevelMetric` of a level:

- ``"segment"``: one value per segment between two adjacent anchors (the segments table's rows,
  :attr:`petri.measure.summary.EventSummary.segments`' order);
- ``"pair"``: one value per unordered concept pair seen adjacent (the pairs table's rows, pairs
  sorted: :attr:`~petri.measure.summary.EventSummary.pair_segments`' order);
- ``"event"``: one value for the whole event.

Every view of a level reads this registry, so a new metric is one :func:`register_metric` call:

- the segments and pairs tables (:func:`petri.measure.tables.segments_table`,
  :func:`~petri.measure.tables.pairs_table`: a column per metric after the row's keys, in
  registration order), and so every CSV and Parquet export of a run and a study's ``segments.csv``
  and ``pairs.csv``;
- the API's ``SegmentOut``, ``PairOut`` and ``PreservationOut`` (the event's figures, answered under
  ``preservation``): a field per metric with ``api`` set (:mod:`petri.web.api.responses`);
- the metric list of the docs (``docs/concepts.md``, made by ``experiments/docs_metrics.py``).

A metric's :attr:`~LevelMetric.compute` takes one event's
:class:`~petri.measure.summary.EventSummary` and returns one value per row of its level (an event
metric: one value).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from petri.measure.metrics import pair_means
from petri.measure.sample_metrics import RESERVED, SampleMetric, check_metric, json_value, sample_metrics
from petri.measure.summary import EventSummary

#: The levels of this registry, and what each keys its rows by (its table's and API's first
#: fields, which no metric may take).
KEYS: dict[str, tuple[str, ...]] = {
    "segment": ("sample", "left", "right", "pair", "start", "end", "length"),
    "pair": ("pair", "concepts"),
    "event": (),
}
LEVELS = tuple(KEYS)


@dataclass(frozen=True)
class LevelMetric:
    """One metric of ``level`` (:data:`LEVELS`). ``column``: its name in the level's table and
    API model. ``compute``: one event's summary → one value per row of the level (``(rows,)``), or
    the value of an event metric. ``dtype``: ``float`` (NaN allowed; ``None`` in JSON), ``int``,
    ``bool`` or ``str``. ``unit``: what a value counts (the docs' list). ``api``: a field of the
    level's API model."""

    column: str
    level: str
    description: str
    dtype: type
    compute: Callable[[EventSummary], Any]
    unit: str = ""
    api: bool = True

    def __post_init__(self):
        if self.level not in KEYS:
            raise ValueError(f"level: {self.level!r} of {self.column!r} is not one of {LEVELS}")
        check_metric(self.column, self.dtype)

    def values(self, summary: EventSummary) -> Sequence | np.ndarray:
        """The metric of every row of ``summary``'s event at this level ``(rows,)``, checked for length
        (an event metric: its one value, as a one-element list)."""
        if self.level == "event":
            return [self.compute(summary)]
        got = self.compute(summary)
        rows = len(summary.segments[0]) if self.level == "segment" else len(summary.pair_segments)
        if len(got) != rows:
            raise ValueError(f"{self.level} metric {self.column!r}: {len(got)} values for {rows} {self.level}s")
        return got

    def json_value(self, value):
        """``value`` as the API answers it (:func:`petri.measure.sample_metrics.json_value`)."""
        return json_value(self.dtype, value)


_METRICS: dict[str, dict[str, LevelMetric]] = {level: {} for level in LEVELS}


def register_metric(metric: LevelMetric) -> LevelMetric:
    """Add ``metric`` as its level's last column (and to every view that reads the registry)."""
    taken = _METRICS[metric.level]
    if metric.column in taken or metric.column in KEYS[metric.level] or metric.column in RESERVED:
        raise ValueError(f"{metric.level} metric {metric.column!r} is already a column of the {metric.level}s")
    taken[metric.column] = metric
    return metric


def unregister_metric(level: str, column: str) -> None:
    """Remove a metric registered by :func:`register_metric` (a test's)."""
    _METRICS[level].pop(column, None)


def metrics(level: str) -> tuple[LevelMetric, ...]:
    """Every registered metric of ``level``, in column order."""
    return tuple(_METRICS[level].values())


def metric_columns(summary: EventSummary, level: str) -> dict[str, Sequence | np.ndarray]:
    """Every registered metric's values of ``level`` (segment or pair) by column, in column order."""
    return {m.column: m.values(summary) for m in metrics(level)}


def every_metric() -> list[SampleMetric | LevelMetric]:
    """Every registered metric of every level: the per-sample ones, then segment, pair and event."""
    return [*sample_metrics(), *(m for level in LEVELS for m in metrics(level))]


def _kept(key: str) -> Callable[[EventSummary], Any]:
    return lambda summary: summary.preservation[key]


for _metric in (
    LevelMetric("instability", "segment", "mean flips over the segment's positions (NaN for an empty segment)",
                float, lambda s: s.segments[1], unit="flips per position"),
    LevelMetric("n_segments", "pair", "the pair's non-empty segments (the ones its instability averages)", int,
                lambda s: [v.size for v in s.pair_segments.values()], unit="segments"),
    LevelMetric("instability", "pair", "mean instability over the pair's non-empty segments (NaN when every "
                "one was empty)", float, lambda s: list(pair_means(s.pair_segments).values()),
                unit="flips per position"),
    LevelMetric("anchors", "event", "anchors pinned in the event's samples", int, _kept("anchors_total"),
                unit="anchors"),
    LevelMetric("intact", "event", "anchors whose concept is a whole word of their sample's final text "
                "(reading 1)", int, _kept("anchors_intact"), unit="anchors"),
    LevelMetric("intact_share", "event", "intact anchors over all anchors (NaN without anchors)", float,
                _kept("intact_share"), unit="share"),
    LevelMetric("mean_agreement", "event", "mean share of steps whose unforced argmax equals an anchor "
                "(reading 2; NaN without anchors)", float, _kept("mean_agreement"), unit="share"),
):
    register_metric(_metric)
