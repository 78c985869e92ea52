"""A study's statistics while it runs: the provisional numbers of the batches stored so far equal
the final analysis once every batch is in, count the events so far per group, wait for 2 events a
group before testing, and the Study tab redraws them (labelled provisional) as batches land."""

from __future__ import annotations

import random
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from petri.service import PetriService
from petri.store import RunStore
from petri.study.analysis import analyze
from petri.study.provisional import provisional_statistics, stored_batches
from petri.tables import segments_table
from petri.web import ui_study
from petri.web.ui_study import StudyController, fields_to_study

N_BOOT = 200


@pytest.fixture()
def service(tiny_lm, tmp_path):
    return PetriService(tiny_lm, RunStore(tmp_path / "store"))


def small_study():
    events = pd.DataFrame(
        [["b1", "benign", "The order was packed.", ""], ["b2", "benign", "The stock was counted.", ""],
         ["c1", "contradictory", "Ninety units in stock, none in stock.", ""],
         ["c2", "contradictory", "The order arrived before it was placed.", ""]],
        columns=["id", "group", "text", "concepts"],
    )
    templates = pd.DataFrame([["t1", "Event: {event}"], ["t2", "{event} ({concepts})"]], columns=["id", "text"])
    meta = {"id": "mini", "title": "mini", "language": "en"}
    return meta, "order, inventory, person", events, templates


@pytest.fixture()
def finished(service):
    meta, concepts, events, templates = small_study()
    study = fields_to_study(meta, concepts, events, templates, "benign, contradictory", "")
    result = service.run_study(study, samples=3, seed=5, templates=["t1", "t2"],
                               settings=service.lm.default_settings().__class__(max_denoising_steps=4))
    return study, result


def test_provisional_equals_final_when_every_batch_is_in(service, finished):
    study, result = finished
    final = analyze(result, n_bootstrap=N_BOOT)
    shuffled = list(result.batches)
    random.Random(3).shuffle(shuffled)  # the order batches arrive in must not matter
    prov = provisional_statistics(study, shuffled, len(result.batches), result.settings.max_denoising_steps,
                                  seed=result.seed, n_bootstrap=N_BOOT)
    assert prov.final and prov.label().startswith("final: 8 of 8 batches")
    assert prov.comparison == final.comparison
    pd.testing.assert_frame_equal(prov.events, final.events)
    assert prov.events_per_group == {"benign": 2, "contradictory": 2}
    # the store holds the same batches the runner returned (the UI reads them while the run goes on)
    read = stored_batches(service.store, result.run_id, study, result.template_ids, result.seed)
    assert [(b.key, b.seed) for b in read] == [(b.key, b.seed) for b in result.batches]


def test_provisional_counts_events_so_far_and_waits_for_two_per_group(finished):
    study, result = finished
    by_key = {b.key: b for b in result.batches}
    steps = result.settings.max_denoising_steps
    partial = [by_key["b1::t1"], by_key["b1::t2"], by_key["b2::t1"], by_key["c1::t1"]]
    prov = provisional_statistics(study, partial, 8, steps, seed=result.seed, n_bootstrap=N_BOOT)
    assert not prov.final and prov.comparison is None
    assert prov.events_per_group == {"benign": 2, "contradictory": 1}
    assert "2 events in each" in prov.waiting and "provisional: 4 of 8 batches" in prov.label()
    assert list(prov.events["event_id"]) == ["b1", "b2", "c1"]
    # an event counts with the templates that are in: b2's value is the mean of its one batch's segments
    b2 = segments_table(by_key["b2::t1"].trajectory)["instability"]
    row = prov.events.set_index("event_id").loc["b2"]
    assert row["n_templates"] == 1 and row["instability"] == pytest.approx(b2.mean())

    # with 2 events a group (template t1 only) the event-level test is the Mann-Whitney of the event means
    t1 = [by_key[f"{e}::t1"] for e in ("b1", "b2", "c1", "c2")]
    prov = provisional_statistics(study, t1, 8, steps, seed=result.seed, n_bootstrap=N_BOOT)
    means = {b.event_id: segments_table(b.trajectory)["instability"].mean() for b in t1}
    expected = sps.mannwhitneyu([means["b1"], means["b2"]], [means["c1"], means["c2"]], method="exact")
    assert prov.comparison is not None
    assert prov.comparison.event.u_statistic == expected.statistic
    assert prov.comparison.event.n_a == 2 and prov.comparison.event.n_b == 2


def test_study_tab_redraws_provisional_figures_as_batches_land(service, monkeypatch):
    monkeypatch.setattr(ui_study, "LIVE_STUDY_REDRAW_S", 0.0)  # redraw after every batch
    meta, concepts, events, templates = small_study()
    updates = list(StudyController(service).run(meta, concepts, events, templates, "benign, contradictory", "",
                                                ["t1", "t2"], 2, 0, 3))
    live = [u for u in updates[:-1] if "instability" in u]
    final = updates[-1]
    assert len(live) == 8  # one redraw per stored batch
    titles = [u["instability"].layout.title.text for u in live]
    # each redraw shows the batches stored when it read the store (the run may be a batch or two
    # ahead of the progress report); in study order (b1 t1, b1 t2, b2 t1, …) k stored batches hold
    # ceil(k/2) events, benign first
    done = [int(re.search(r"(\d+) of 8 batches", t).group(1)) for t in titles]
    assert done == sorted(done) and done[-1] == 8
    for k, title in zip(done, titles):
        benign, contra = min(2, -(-k // 2)), max(0, -(-(k - 4) // 2))
        state = "final" if k == 8 else "provisional"
        assert f"{state}: {k} of 8 batches; events so far: benign {benign}, contradictory {contra}" in title, title
        stats = live[titles.index(title)]["stats"]
        # 2 events a group: the test is there but flagged uninformative (issue 23); provisional ones warn of peeking
        assert ("UNINFORMATIVE" in stats) == (contra >= 2) and ("not yet" in stats) == (contra < 2)
        assert ("inflates the false-positive rate" in stats) == (k < 8)
    assert "provisional" not in final["instability"].layout.title.text
    assert final["stats"].startswith("**Final**") and "Headline (event level" in final["stats"]
    run_id = service.store.list_runs(1)[0]["run_id"]
    assert f"`{run_id}`" in updates[0]["status"]  # the run id the tab predicted is the runner's
    names = {p.rsplit("/", 1)[-1] for p in final["files"]}
    assert {"positions.csv", "segments.csv", "events.csv", "report.md"} <= names
    assert not service.busy and np.isfinite(final["groups"]["median_instability"]).all()


def test_the_study_tab_runs_a_job_and_its_cancel_stops_it_keeping_the_stored_batches(service):
    """The tab's run is a job of the service's queue (visible as a job, like ``POST /api/jobs``);
    the Cancel event set after the first stored batch stops it: the job reads ``cancelled``, the
    run keeps its stored batches, and the tab says so."""
    import threading

    meta, concepts, events, templates = small_study()
    cancel = threading.Event()
    updates = []
    for update in StudyController(service).run(meta, concepts, events, templates, "benign, contradictory", "",
                                               ["t1", "t2"], 2, 0, 40, cancel=cancel):
        updates.append(update)
        if "1 of 8 batches" in update.get("status", ""):
            cancel.set()
    (job,) = list(service.jobs)
    assert job.kind == "study" and job.status == "cancelled"
    run = service.store.get_run(job.run_id)
    assert run["status"] == "cancelled" and 1 <= run["events_stored"] < 8
    assert "stopped (the job was cancelled); its stored batches stay" in updates[-1]["status"]
    assert not service.busy


def test_the_dish_tab_runs_a_job_and_its_cancel_stops_it(service):
    """Cancel while the Dish tab samples: the job stops within a step, the run reads cancelled."""
    import threading

    from petri.web.ui_dish import DishController

    ctl = DishController(service)
    cancel = threading.Event()
    placement = ctl.spread("order, inventory", True)
    inputs = ("order, inventory", "The order was packed.", "Event: {event}", 4, 0, placement, True, 200,
              None, None, None, False, True)
    updates = []
    for update in ctl.run(*inputs, cancel=cancel):
        updates.append(update)
        if update.get("status", "").startswith("Sampling"):
            cancel.set()
    (job,) = list(service.jobs)
    assert job.kind == "seed" and job.status == "cancelled" and job.done < 200
    assert service.store.get_run(job.run_id)["status"] == "cancelled"
    assert updates[-1]["status"] == "Stopped: the job was cancelled."
