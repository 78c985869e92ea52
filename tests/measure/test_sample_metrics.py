"""Issue 48: a per-sample metric declares its column once. One register_sample_metric call in this
test (no other file touched) puts a new metric into the samples table, the API's answer (and its
OpenAPI schema), the UI's Samples table, a study's events table and its report; unregistering takes
it out of all of them again."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from fastapi.testclient import TestClient

from petri.core.dish import Dish
from petri.engine.seeding import seed_dish
from petri.measure.metrics import flip_counts
from petri.measure.sample_metrics import SampleMetric, register_sample_metric, sample_metrics, total, unregister_sample_metric
from petri.measure.tables import samples_table
from petri.study.execution.runner import StudyBatch
from petri.study.results.analysis import events_table, study_tables
from petri.study.results.report import _metrics_section
from petri.web.app import create_app
from petri.web.ui.dish_tab.dish import DishController
from petri.web.ui.views import samples_columns

NEW = "free_flips_total"


@pytest.fixture()
def new_metric():
    """The new metric: all flips of a sample (anchors flip 0 times), its events-table column the mean."""
    metric = register_sample_metric(SampleMetric(
        NEW, "all flips of the sample", int, lambda summary: summary.flips.sum(axis=1), higher_is="worse"))
    yield metric
    unregister_sample_metric(NEW)


@pytest.fixture()
def trajectory(tiny_lm):
    return seed_dish(tiny_lm, Dish(("order", "person"), "The order was packed."), 3, tiny_lm.default_settings(), seed=3)


def hand_totals(traj) -> list[int]:
    """The metric by its definition, from the flip counts computed directly (not through a summary)."""
    return flip_counts(traj.argmax, traj.steps, traj.anchor_mask).sum(axis=1).tolist()


def test_the_samples_table_and_the_ui_show_the_new_metric(new_metric, trajectory):
    table = samples_table(trajectory)
    assert list(table.columns)[-1] == NEW and table[NEW].tolist() == hand_totals(trajectory)
    assert max(hand_totals(trajectory)) > 0  # the seed flips something: the check is not 0 == 0
    columns = samples_columns()
    assert NEW in columns and list(columns)[-1] == "final_text"
    assert DishController.samples_view(trajectory)[NEW].tolist() == hand_totals(trajectory)


def test_the_api_answers_and_documents_the_new_metric(new_metric, service):
    app = create_app(service, ui=False)
    with TestClient(app) as client:
        answer = client.post("/api/seed", json={"concepts": ["order", "person"], "event": "The order was packed.",
                                                 "samples": 2, "seed": 4})
        assert answer.status_code == 200, answer.text
        samples = answer.json()["events"][0]["samples"]
        read = client.get(f"/api/runs/{answer.json()['run_id']}").json()["events"][0]["samples"]
        schema = client.get("/openapi.json").json()["components"]["schemas"]["SampleOut"]
    assert [s[NEW] for s in samples] == [sum(s["flips"]) for s in samples]  # the answer's own flips
    assert [s[NEW] for s in read] == [s[NEW] for s in samples]  # a stored run reads back the same
    assert schema["properties"][NEW]["description"] == "all flips of the sample" and NEW in schema["required"]


def test_a_studys_events_table_and_report_aggregate_the_new_metric(new_metric, trajectory):
    batches = [StudyBatch("e1", "t1", "benign", 3, trajectory), StudyBatch("e2", "t1", "benign", 3, trajectory)]
    study = SimpleNamespace(id="s", events=[SimpleNamespace(id=e, group="benign", text="The order was packed.")
                                            for e in ("e1", "e2")])
    tables = study_tables(batches, "s")
    events = events_table(tables, study, max_steps=8, n_boot=10)
    want = np.mean(hand_totals(trajectory))
    assert events[NEW].tolist() == pytest.approx([want, want])
    # built in metrics keep their place: the new column comes after every one of theirs
    assert list(events.columns).index(NEW) == list(events.columns).index("mean_agreement") + 1
    report = "\n".join(_metrics_section(tables["samples"]))
    assert f"`{NEW}`: all flips of the sample (higher is worse)." in report and f"| {NEW} |" in report


def test_a_metric_can_aggregate_otherwise_and_unregistering_removes_it(trajectory):
    register_sample_metric(SampleMetric(NEW, "all flips", int, lambda s: s.flips.sum(axis=1),
                                        per_event=(("flips_all_samples", total),), api=False, ui_width=None,
                                        report=False))
    try:
        batches = [StudyBatch("e1", "t1", "benign", 3, trajectory)]
        study = SimpleNamespace(id="s", events=[SimpleNamespace(id="e1", group="benign", text="x")])
        events = events_table(study_tables(batches, "s"), study, max_steps=8, n_boot=10)
        assert events["flips_all_samples"].tolist() == [sum(hand_totals(trajectory))]
        assert NEW not in samples_columns() and _metrics_section(study_tables(batches, "s")["samples"]) == []
    finally:
        unregister_sample_metric(NEW)
    assert NEW not in samples_table(trajectory) and NEW not in [m.column for m in sample_metrics()]


def test_a_metric_is_refused_by_its_bad_field():
    with pytest.raises(ValueError, match="already a column"):
        register_sample_metric(SampleMetric("steps", "again", int, lambda s: s.traj.steps))
    with pytest.raises(ValueError, match="dtype"):
        SampleMetric("x", "x", list, lambda s: [])
    with pytest.raises(ValueError, match="higher_is"):
        SampleMetric("x", "x", float, lambda s: [], higher_is="up")
