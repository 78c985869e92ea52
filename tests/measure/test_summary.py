"""Issue 48: one summary per event. A run's four tidy tables, the API's answer for an event, Compare's
paired table and a study batch's tables count the event's flips once (they counted them once per
table: 4 times for a run's CSVs, and the preservation rows twice), and read the same numbers as the
metrics computed directly."""

from __future__ import annotations

import numpy as np
import pytest

import petri.measure.summary as summary_module
from petri.core.dish import Dish
from petri.engine.seeding import seed_dish
from petri.measure.metrics import flip_counts
from petri.measure.summary import EventSummary, summary_of


@pytest.fixture()
def trajectories(tiny_lm):
    settings = tiny_lm.default_settings()
    return [seed_dish(tiny_lm, Dish(("order", "person"), text), 2, settings, seed=3)
            for text in ("The order was packed.", "Ninety units in stock, none in stock.")]


@pytest.fixture()
def counted(count_calls):
    """How many times the flips were counted (flip_counts as the summary module calls it)."""
    return count_calls(summary_module, "flip_counts")


def test_a_runs_tables_count_each_events_flips_once(trajectories, counted):
    from petri.runs.export import TABLES, run_tables

    tables = run_tables(trajectories, ["benign", "contradictory"])
    assert set(tables) == set(TABLES) and len(counted) == len(trajectories)


def test_the_api_answer_counts_the_flips_once_and_reports_them(trajectories, counted):
    from petri.web.api.responses import event_summary

    traj = trajectories[0]
    out = event_summary(0, traj, None)
    assert len(counted) == 1
    want = flip_counts(traj.argmax, traj.steps, traj.anchor_mask)
    assert [s.flips for s in out.samples] == want.tolist()
    free = ~traj.anchor_mask
    assert [s.mean_flips_free for s in out.samples] == pytest.approx(list(want.sum(axis=1) / free.sum(axis=1)))


def test_compares_paired_table_counts_each_events_flips_once(trajectories, counted):
    from petri.web.ui.compare import paired_samples

    paired_samples(*trajectories, ("benign", "contradictory"))
    assert len(counted) == 2


def test_a_summary_is_computed_once_and_passes_through(trajectories, counted):
    event = EventSummary(trajectories[0])
    assert event.flips is event.flips and len(counted) == 1
    assert summary_of(event) is event and summary_of(trajectories[0]) is not event
    # anchors rows: one per sample x anchor, in each sample's order
    rows = event.anchors
    assert len(rows) == sum(len(a) for a in trajectories[0].anchors)
    assert list(rows["concept"]) == [a.concept for spans in trajectories[0].anchors for a in spans]
    np.testing.assert_array_equal(event.mean_flips_free * (~trajectories[0].anchor_mask).sum(axis=1), event.flips.sum(axis=1))
