"""The per-sample columns, declared once (no torch).

Every column of the samples table after ``sample`` is a :class:`SampleMetric` registered here, in
column order. Every view of a sample reads this registry, so a new per-sample metric is one
:func:`register_sample_metric` call:

- the samples table (:func:`petri.measure.tables.samples_table`, and so every CSV and study table);
- the API's ``SampleOut`` (:mod:`petri.web.api.responses`: a field per metric with ``api`` set);
- the UI's Samples table (:mod:`petri.web.ui.dish_tab.dish`: a column per metric with a ``ui_width``);
- a study's events table (:func:`petri.study.results.analysis.events_table`: the metric's ``per_event``
  aggregates of the event's samples);
- a study's report (:mod:`petri.study.results.report`: the group means of every metric with ``report`` set).

A metric's :attr:`~SampleMetric.compute` takes one event's
:class:`~petri.measure.summary.EventSummary` and returns one value per sample ``(S,)``: the summary
holds what several metrics share (the flips, the preservation rows), computed once per event.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from petri.measure.metrics import in_canvas_order, settled_share
from petri.measure.summary import EventSummary

#: How one metric's values over an event's samples ``(n,)`` become one number of the study's events
#: table; the second argument is the study's step limit (``max_denoising_steps``).
Aggregate = Callable[[pd.Series, int], float | int]


def json_number(value) -> float | None:
    """JSON-safe float: NaN/inf → None."""
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def json_value(dtype: type, value):
    """A metric's ``value`` of ``dtype`` as the API answers it (a NumPy scalar as its Python type; a
    float NaN or infinity is ``None``)."""
    return json_number(value) if dtype is float else dtype(value)


def check_metric(column: str, dtype: type) -> None:
    """What every metric of every level must be: ``column`` an identifier (it names an API field),
    ``dtype`` one of float, int, bool and str; refused naming the bad field."""
    if not column.isidentifier():
        raise ValueError(f"column: {column!r} is not an identifier (it names an API field)")
    if dtype not in (float, int, bool, str):
        raise ValueError(f"dtype: {dtype!r} of {column!r} is not float, int, bool or str")


def api_type(dtype: type) -> Any:
    """The API field's type of a metric of ``dtype`` (a float may be ``None``: NaN in JSON)."""
    return float | None if dtype is float else dtype


def mean(values: pd.Series, max_steps: int) -> float:
    """The mean over the event's samples (NaN samples skipped, as pandas does)."""
    return float(values.mean())


def total(values: pd.Series, max_steps: int) -> int:
    """The sum over the event's samples."""
    return int(values.sum())


def share_below_limit(values: pd.Series, max_steps: int) -> float:
    """The share of the event's samples whose value (steps) is below the step limit: stopped early."""
    return float((values < max_steps).mean())


@dataclass(frozen=True)
class SampleMetric:
    """One per-sample column.

    ``column``: its name in the samples table (and the API field, the UI header). ``compute``: one
    event's summary → one value per sample ``(S,)``. ``dtype``: ``float`` (NaN allowed; ``None`` in
    JSON), ``int``, ``bool`` or ``str``. ``higher_is``: ``"better"``, ``"worse"`` or ``None`` (not
    an ordered quality). ``api``: a field of the API's ``SampleOut``. ``ui_width``: the UI's column
    width in px (``None``: not shown). ``per_event``: the study events table's columns made from it,
    ``(column, aggregate)`` in order (default: its mean under its own name, for a number).
    ``event_order``: where those columns go among the other metrics' (ties: registration order).
    ``report``: a column of the report's per-sample metrics table (group means). ``unit``: what a
    value counts (the docs' metric list).
    """

    column: str
    description: str
    dtype: type
    compute: Callable[[EventSummary], Sequence | np.ndarray]
    higher_is: str | None = None
    api: bool = True
    ui_width: int | None = 150
    per_event: tuple[tuple[str, Aggregate], ...] | None = None
    event_order: int = 100
    report: bool = True
    unit: str = ""

    @property
    def level(self) -> str:
        """The rows it has one value per (a metric of another level: :mod:`petri.measure.level_metrics`)."""
        return "sample"

    def __post_init__(self):
        check_metric(self.column, self.dtype)
        if self.higher_is not in ("better", "worse", None):
            raise ValueError(f"higher_is: {self.higher_is!r} of {self.column!r} is not 'better', 'worse' or None")
        if self.per_event is None:
            numeric = self.dtype in (float, int)
            object.__setattr__(self, "per_event", ((self.column, mean),) if numeric else ())

    def values(self, summary: EventSummary) -> Sequence | np.ndarray:
        """The metric of every sample of ``summary``'s event ``(S,)``, checked for length."""
        got = self.compute(summary)
        if len(got) != summary.traj.n_samples:
            raise ValueError(f"sample metric {self.column!r}: {len(got)} values for {summary.traj.n_samples} samples")
        return got

    def json_value(self, value):
        """``value`` as the API answers it (:func:`json_value`)."""
        return json_value(self.dtype, value)


_METRICS: dict[str, SampleMetric] = {}

#: The samples table's columns that are no metric (its key) and that a metric may not take.
RESERVED = ("event", "template", "model_id", "sample", "event_index", "group", "event_id", "template_id", "batch")


def register_sample_metric(metric: SampleMetric) -> SampleMetric:
    """Add ``metric`` as the samples table's last column (and to every view that reads the registry)."""
    if metric.column in _METRICS or metric.column in RESERVED:
        raise ValueError(f"sample metric {metric.column!r} is already a column of the samples table")
    _METRICS[metric.column] = metric
    return metric


def unregister_sample_metric(column: str) -> None:
    """Remove a metric registered by :func:`register_sample_metric` (a test's)."""
    _METRICS.pop(column, None)


def sample_metrics() -> tuple[SampleMetric, ...]:
    """Every registered metric, in column order."""
    return tuple(_METRICS.values())


def event_metric_columns() -> list[tuple[str, str, Aggregate]]:
    """The study events table's metric columns in order: ``(events column, samples column, aggregate)``."""
    ordered = sorted(sample_metrics(), key=lambda m: m.event_order)  # stable: registration order on ties
    return [(name, m.column, how) for m in ordered for name, how in m.per_event or ()]  # set by __post_init__


def _layout(summary: EventSummary) -> list[str]:
    return [",".join(f"{a.concept}@{a.start}" for a in in_canvas_order(spans)) for spans in summary.traj.anchors]


def _kept(key: str) -> Callable[[EventSummary], list]:
    return lambda summary: [k[key] for k in summary.kept_by_sample]


for _metric in (
    SampleMetric("steps", "denoising steps the sample ran", int, lambda s: s.traj.steps, api=False, ui_width=80,
                 per_event=(("mean_steps", mean), ("stopped_early_share", share_below_limit)), event_order=1,
                 report=False, unit="steps"),
    SampleMetric("mean_flips_free", "mean flips over the sample's free (non-anchor) positions", float,
                 lambda s: s.mean_flips_free, higher_is=None, ui_width=170, event_order=0, report=False,
                 unit="flips per position"),
    SampleMetric("settled_share", "share of free positions that did not flip in the last 3 steps", float,
                 lambda s: settled_share(s.traj.argmax, s.traj.steps, 3, s.traj.anchor_mask), higher_is=None,
                 event_order=2, report=False, unit="share"),
    SampleMetric("anchor_layout", "the anchors in canvas order, concept@start", str, _layout, api=False,
                 ui_width=170, report=False),
    SampleMetric("final_text", "the sample's decoded final text", str, lambda s: s.traj.final_texts, api=False,
                 ui_width=520, report=False),
    SampleMetric("anchors_intact", "anchors whose concept is a whole word of the final text (reading 1)", int,
                 _kept("anchors_intact"), higher_is="better", api=False, ui_width=160,
                 per_event=(("anchors_intact", total),), event_order=3, report=False, unit="anchors"),
    SampleMetric("n_anchors", "anchors pinned in the sample", int, _kept("anchors_total"), api=False,
                 ui_width=120, per_event=(("anchors_total", total),), event_order=4, report=False, unit="anchors"),
    SampleMetric("mean_agreement", "mean share of steps whose unforced argmax equals an anchor (reading 2)", float,
                 _kept("mean_agreement"), higher_is="better", api=False, ui_width=160, event_order=5, report=False,
                 unit="share"),
):
    register_sample_metric(_metric)
