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

from petri.core.watch import Watch
from petri.measure.tables import segments_table
from petri.study.plan import StudyPlan
from petri.study.results.analysis import analyze
from petri.study.results.provisional import provisional_statistics, stored_batches
from petri.web.ui.study_tab import study as ui_study
from petri.web.ui.study_tab.study import StudyController, fields_to_study
from study_support import study_fields, tab_study

N_BOOT = 200


def small_study():
    return study_fields(tab_study())


@pytest.fixture()
def finished(service):
    meta, concepts, events, templates = small_study()
    study = fields_to_study(meta, concepts, events, templates, "benign, contradictory", "")
    result = service.run_study(StudyPlan(study, samples=3, seed=5, templates=("t1", "t2"),
                                         settings=service.lm.default_settings().__class__(max_denoising_steps=4)))
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
    monkeypatch.setattr(ui_study, "LIVE_STUDY_REDRAW_SHARE", 1.0)
    meta, concepts, events, templates = small_study()
    updates = list(StudyController(service).run(meta, concepts, events, templates, "benign, contradictory", "",
                                                ["t1", "t2"], 2, 0, 3))
    live = [u for u in updates[:-1] if u.get("instability") is not None]
    final = updates[-1]
    assert len(live) == 7  # one redraw per stored batch but the last (the final views follow it)
    titles = [u["instability"].layout.title.text.replace("<br>", " ") for u in live]  # a page's title is wrapped
    # each redraw shows the batches stored when it read the store (the run may be a batch or two
    # ahead of the progress report); in run order (template t1 first, the groups taking turns,
    # benign first) k stored batches hold ceil(k/2) benign and floor(k/2) contradictory events, 2 at most
    done = [int(re.search(r"(\d+) of 8 batches", t).group(1)) for t in titles]
    assert done == sorted(done) and done[-1] >= 7
    for k, title in zip(done, titles):
        benign, contra = min(2, -(-k // 2)), min(2, k // 2)
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
    names = {p.rsplit("/", 1)[-1] for p in final["files"]["value"]}
    assert {"positions.csv", "segments.csv", "events.csv", "report.md"} <= names
    assert not service.busy and np.isfinite(final["groups"]["value"]["median_instability"]).all()


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

    from petri.web.ui.dish_tab.dish import DishController

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
    steps_seen = sum(1 for u in updates if u.get("status", "").startswith("Sampling"))
    assert steps_seen >= 1
    last = updates[-1]
    assert last["status"].startswith("Stopped: the job was cancelled; cancelled at step ")
    k = int(last["status"].rsplit(" ", 1)[1].rstrip("."))
    assert k + 1 >= steps_seen and job.run_id in last["run_badge"] and f"cancelled at step {k}" in last["run_badge"]
    # the partial record says what it is: not live, cancelled at step k (counted from 0, as the viewer
    # and the flip map count steps), steps 0..k of sample 0
    assert last["traj_view"]["live"] is False and last["traj_view"]["status"] == f"cancelled at step {k}"
    assert last["traj_view"]["steps"] == k + 1 and last["heatmap"].layout.title.text.endswith(f"step {k}")
    assert last["heatmap"].layout.yaxis.dtick == 1 and last["heatmap"].layout.yaxis.tick0 == 0  # whole steps only


STUDY_VIEWS = {"status", "instability", "events", "jaccard", "jaccard_note", "stats", "groups", "files", "report",
               "pairs", "power", "power_table"}


def assert_views_of(update: dict, run_id: str) -> None:
    """Every view of the Study tab is in ``update`` and holds or names run ``run_id``: figures name
    it (``run`` + its first 8 characters), the groups table and the downloads name it in their
    labels and the files are that run's, the statistics and the report name it."""
    assert STUDY_VIEWS <= set(update), STUDY_VIEWS - set(update)
    tag = f"run {run_id[:8]}"
    for name in ("instability", "events", "jaccard"):
        fig = update[name]["value"] if isinstance(update[name], dict) else update[name]  # jaccard: shown or hidden
        if fig is not None:
            texts = [fig.layout.title.text or ""] + [a.text or "" for a in fig.layout.annotations]
            assert any(tag in t for t in texts), (name, texts)
    assert run_id in update["groups"]["label"] and run_id in update["files"]["label"]
    assert run_id in update["pairs"]["label"]
    assert run_id in update["power"] and update["power_table"]["value"] is None  # issue 60: no other run's estimate
    if isinstance(update["jaccard"], dict) and not update["jaccard"]["visible"]:  # a sentence in its place, naming the run
        assert run_id in update["jaccard_note"]["value"]
    for path in update["files"]["value"] or []:
        assert f"/{run_id}/" in path
    assert run_id in update["stats"] and run_id in update["report"] and run_id in update["status"]


def test_every_study_view_holds_the_run_on_screen(service):
    """A new study, a cancelled one and the reopening of the cancelled one: every update replaces
    every view (figures, groups, downloads, report) with the run's own or clears it, naming the run
    (the shipped study's downloads and Jaccard figure stayed on screen before)."""
    import threading

    from petri.web.ui.runs import RunsController

    meta, concepts, events, templates = small_study()
    ctl = StudyController(service)
    updates = list(ctl.run(meta, concepts, events, templates, "benign, contradictory", "", ["t1", "t2"], 2, 0, 3))
    run_id = service.store.list_runs(1)[0]["run_id"]
    for update in (updates[0], updates[-1]):
        assert_views_of(update, run_id)
    assert updates[0]["files"]["value"] is None and updates[0]["jaccard"]["value"] is None  # nothing of another run
    assert all(update[k] is not None for k in ("instability", "events") for update in updates[-1:])
    assert updates[-1]["jaccard"]["value"] is not None  # two templates: the heatmap
    for update in updates[1:-1]:  # live: a redraw replaces every view, a status line alone touches nothing else
        assert set(update) == {"status"} or STUDY_VIEWS <= set(update)
        if len(update) > 1:
            assert_views_of(update, run_id)

    cancel = threading.Event()
    for update in ctl.run(meta, concepts, events, templates, "benign, contradictory", "", ["t1", "t2"], 2, 1, 40,
                          cancel=cancel):
        stopped = update
        if " of 8 batches" in update.get("status", ""):
            cancel.set()
    other = next(r["run_id"] for r in service.store.list_runs(5) if r["status"] == "cancelled")
    assert other != run_id and "stopped" in stopped["status"]
    assert_views_of(stopped, other)
    assert stopped["instability"] is not None and "provisional" in stopped["instability"].layout.title.text

    kind, note, views = RunsController(service, {"study": ctl}).open(other)
    assert kind == "study"
    assert_views_of({**{k: v for k, v in views.items() if k in STUDY_VIEWS}, "status": note}, other)
    assert views["files"]["value"] is None and views["jaccard"]["value"] is None


def test_a_redraw_waits_four_times_its_own_cost_and_the_reader_decodes_each_batch_once(service, finished, monkeypatch):
    """The live study views cost at most a fixed share of the run: with the 2 s floor and a 20 %
    share, a redraw that took 1 s is next due 4 s after it started; and following a run reads each
    stored batch from the store once (the whole store was read again at every redraw before)."""
    from petri.runs import store as store_module
    from petri.study.results.provisional import BatchReader

    assert ui_study.redraw_due(10.0, None, 0.0)
    assert not ui_study.redraw_due(11.9, 10.0, 0.1) and ui_study.redraw_due(12.0, 10.0, 0.1)  # the 2 s floor
    assert not ui_study.redraw_due(13.9, 10.0, 1.0) and ui_study.redraw_due(14.0, 10.0, 1.0)  # 1 s × 0.8 / 0.2
    study, result = finished
    decoded = []
    original = store_module.trajectory_from_blobs
    monkeypatch.setattr(store_module, "trajectory_from_blobs", lambda *a: decoded.append(1) or original(*a))
    reader = BatchReader(service.store, result.run_id, study, result.template_ids, result.seed)
    first, again = reader.read(), reader.read()
    assert len(first) == len(again) == len(result.batches) == 8 and len(decoded) == 8
    assert [b.key for b in again] == [b.key for b in result.batches]


def test_cancel_says_whether_a_run_was_going_on():
    """Cancel with nothing running has an answer (it said nothing before): ``cancel`` reports
    whether the session had a run; an ended run is forgotten, a newer one is not."""
    import threading

    from petri.web.ui.live import CancelButtons

    buttons = CancelButtons()
    assert buttons.cancel("s1") is False
    first = buttons.start("s1")
    assert buttons.cancel("s2") is False and not first.is_set()
    assert buttons.cancel("s1") is True and first.is_set()
    buttons.finish("s1", first)
    assert buttons.cancel("s1") is False
    second = buttons.start("s1")
    buttons.finish("s1", threading.Event())  # an older run ending leaves the newer one cancellable
    assert buttons.cancel("s1") is True and second.is_set()


def test_the_compare_tab_draws_each_events_flip_map_while_it_samples(service, monkeypatch):
    """Issue 20 item 11: while a comparison samples, A's flip map is redrawn as A's steps arrive,
    then B's as B's do (each titled with its label, the status naming the event sampling); the last
    live map of each event counts what its stored trajectory counts (flip_grid summed over samples),
    so no step of B was counted into A's map or dropped."""
    from petri.measure.metrics import flip_grid
    from petri.web.ui.compare import CompareController
    from petri.web.ui.dish_tab import dish_live as ui_dish_live
    from petri.web.ui.dish_tab.dish import DishController

    monkeypatch.setattr(ui_dish_live, "LIVE_REDRAW_S", 0.0)  # draw every step
    ctl = CompareController(service, DishController(service))
    updates = list(ctl.run("order, inventory", "calm", "The order was packed.", "tense", "None of it was in stock.",
                           "{event}", 2, 0, 12, None, True, None, None, None, False, None))
    final = updates[-1]
    live = updates[1:-1]
    a_live = [i for i, u in enumerate(live) if u.get("heatmap_a") is not None]
    b_live = [i for i, u in enumerate(live) if u.get("heatmap_b") is not None]
    assert a_live and b_live and a_live[-1] < b_live[0]  # A's steps first, then B's
    assert "Sampling calm (event 1 of 2)" in live[a_live[0]]["status"]
    assert "Sampling tense (event 2 of 2)" in live[b_live[0]]["status"]
    (_, _, a), (_, _, b) = service.store.load_events(final["run_id"])
    for key, label, traj, last in (("heatmap_a", "calm", a, live[a_live[-1]]), ("heatmap_b", "tense", b, live[b_live[-1]])):
        fig = last[key]
        assert fig.layout.title.text.startswith(f"{label}<br>flips while sampling")  # the label on a line of its own
        z = np.asarray(fig.data[0].z, dtype=float)
        expected = flip_grid(traj.argmax, traj.steps, traj.anchor_mask).sum(axis=0).astype(float)
        assert z.shape == expected.shape
        free = ~np.isnan(z)
        assert free.any()
        np.testing.assert_array_equal(z[free], expected[free])
    assert "Done" in final["status"]


def test_a_queued_seed_names_each_event_before_its_steps(service):
    """``submit_seed``'s ``watch.progress(index)`` comes on the job's thread before event ``index``'s first
    step, so a caller can tell the events' steps apart without guessing from the step index."""
    from petri.app.service import SeedEvent
    from petri.core.dish import Dish
    from petri.core.trajectory import SamplerSettings

    order: list = []
    events = [SeedEvent(Dish(("order", "inventory"), text), group) for text, group in
              (("The order was packed.", "calm"), ("None of it was in stock.", "tense"))]
    job = service.submit_seed(service.plan(events, 2, SamplerSettings(max_denoising_steps=5), seed=3),
                              watch=Watch(on_step=lambda step: order.append(("step", step.index)),
                                          progress=lambda index: order.append(("event", index))))
    result = service.jobs.wait(job.job_id, timeout=120).result
    starts = [i for i, item in enumerate(order) if item[0] == "event"]
    assert [order[i] for i in starts] == [("event", 0), ("event", 1)] and starts[0] == 0
    for event, (begin, end) in enumerate(zip(starts, starts[1:] + [len(order)])):
        steps = [index for _, index in order[begin + 1:end]]
        assert steps == list(range(int(result.trajectories[event].steps.max())))  # this event's steps, from 0


def test_the_compare_tab_keeps_the_events_apart_when_steps_do_not_restart_at_zero(service, monkeypatch):
    """Which event a live step belongs to comes from the service (``watch.progress``), not from the step
    index falling back to 0: with a sampler whose stream skips step 0, B's steps still draw B's map."""
    import petri.app.service as service_module
    from petri.web.ui.compare import CompareController
    from petri.web.ui.dish_tab import dish_live as ui_dish_live
    from petri.web.ui.dish_tab.dish import DishController

    real = service_module.sample_planned

    def skipping_step_zero(*args, on_step=None, **kwargs):
        relay = None if on_step is None else (lambda step: on_step(step) if step.index > 0 else None)
        return real(*args, on_step=relay, **kwargs)

    monkeypatch.setattr(service_module, "sample_planned", skipping_step_zero)
    monkeypatch.setattr(ui_dish_live, "LIVE_REDRAW_S", 0.0)  # draw every step
    ctl = CompareController(service, DishController(service))
    updates = list(ctl.run("order, inventory", "calm", "The order was packed.", "tense", "None of it was in stock.",
                           "{event}", 2, 0, 12, None, True, None, None, None, False, None))
    live = updates[1:-1]
    a_live = [i for i, u in enumerate(live) if u.get("heatmap_a") is not None]
    b_live = [i for i, u in enumerate(live) if u.get("heatmap_b") is not None]
    (_, _, a), (_, _, b) = service.store.load_events(updates[-1]["run_id"])
    assert len(a_live) == int(a.steps.max()) - 1 and len(b_live) == int(b.steps.max()) - 1  # every step but 0
    assert a_live[-1] < b_live[0]
    assert all("(event 2 of 2)" in live[i]["status"] for i in b_live)


def test_a_run_click_while_the_model_is_held_says_queued(service):
    """Issue 20 item 13: the status a Run click sets at once is the queued line while another job
    holds the model, and no update (the run's own first line follows at once) while it is free."""
    import gradio as gr

    from petri.web.ui.live import QUEUED_LINE, queued_status

    assert queued_status(service.busy) == gr.update()
    with service.exclusive():
        assert service.busy and queued_status(service.busy) == QUEUED_LINE
    assert "Queued" in QUEUED_LINE and "Stopped" not in QUEUED_LINE


def click_events(demo, elem_id: str) -> list:
    """The events a click on the button ``elem_id`` starts, in the order they were wired (the order
    Gradio's page runs them)."""
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)
    return [fn for fn in demo.fns.values() if any(t[0] == button._id and t[1] == "click" for t in fn.targets)]


def run_click(events: list, inputs: list, shown: str = "") -> tuple:
    """A Run click as Gradio carries it out (the status line reading ``shown``): the status line the
    unqueued event sets at once, and the queued run's validator answer (None: no validator, the run
    is queued whatever the inputs)."""
    at_once = [fn for fn in events if not fn.queue]
    queued = [fn for fn in events if fn.queue]
    assert len(at_once) == 1 and len(queued) == 1, events
    status = at_once[0].fn(*inputs, shown) if at_once[0].inputs else at_once[0].fn()
    checks = queued[0].validator(*inputs) if queued[0].validator is not None else None
    return status, checks


def test_a_refused_run_is_never_queued_and_never_says_queued(service):
    """Issue 21 item 1: while another job holds the model, a Run click with a bad concept list on the
    Dish, Compare or Study tab set the status line to the queued line (and, on Compare and Study,
    queued the run, to fail once the model was free) while the field was marked bad. Now each tab's
    validator refuses the inputs before anything is queued, marking the concept field with the
    concepts error, and the status line names the refusal instead; valid inputs still say queued."""
    import gradio as gr

    from petri.web.ui.build import build_ui
    from petri.web.ui.dish_tab.dish import DishController
    from petri.web.ui.live import QUEUED_LINE, REFUSED_LINE

    demo = build_ui(service)
    spread = DishController(service).spread
    meta, concepts, events, templates = small_study()
    def dish(c):
        return [c, "Only 90 units are in stock.", "{event}", 2, 0, spread(c), True, 4, 0.1, 0.4, 0.8, False, True]

    def compare(c):
        return [c, "calm", "The order was packed.", "tense", "Ninety units in stock, none in stock.", "{event}",
                2, 0, 4, spread(c), True, None, None, None, False, None]

    def study(c):
        return [meta, c, events, templates, "benign, contradictory", "", ["t1"], 2, 0, 4]
    # the Study tab's validator writes the status line only (wire_run's mark_fields=False): Gradio's
    # validator step refuses a loaded study's template choice (the study browser tests)
    tabs = [("petri-run", dish, 0), ("petri-cmp-run", compare, 0), ("petri-study-run", study, 1)]
    queued_anyway = {"petri-study-run"}
    from petri.web.ui.study_tab.study import StudyController

    study_validate = StudyController(service).validate
    bad_word = "order, inv\u0007entory"  # a control character: the concept check refuses it
    with service.exclusive():
        assert service.busy
        for button, inputs, concept_input in tabs:
            events_of_click = click_events(demo, button)
            status, checks = run_click(events_of_click, inputs(bad_word))
            if button in queued_anyway:
                assert checks is None, f"{button}: Gradio's validator step cannot read this tab's inputs"
                checks = study_validate(*inputs(bad_word))
            assert checks is not None, f"{button}: no validator, the bad run is queued"
            bad = [i for i, v in enumerate(checks) if not v["is_valid"]]
            assert bad == [concept_input] and "concepts" in checks[concept_input]["message"], (button, checks)
            assert status != QUEUED_LINE and status.startswith(REFUSED_LINE), (button, status)
            assert checks[concept_input]["message"] in status, (button, status)
            refusal = status
            status, checks = run_click(events_of_click, inputs("order, inventory, person"), refusal)
            if button in queued_anyway:
                checks = study_validate(*inputs("order, inventory, person"))
            assert all(v["is_valid"] for v in checks), (button, checks)
            assert status == QUEUED_LINE, button
    # the model free: a valid click clears an earlier refusal (the run starts at once), and leaves
    # any other line (e.g. the previous run's) for the run's own first line
    events_of_click = click_events(demo, "petri-run")
    assert run_click(events_of_click, dish("order, inventory, person"), refusal)[0] == ""
    assert run_click(events_of_click, dish("order, inventory, person"), "Done: run x")[0] == gr.update()


def test_the_compare_and_study_validators_mark_the_field_that_holds_the_error(service):
    """Issue 21 item 1: the Compare and Study tabs' new validators mark the input holding the bad field
    (the second label when both labels are the same, event B when it is empty, the template choice
    when none is chosen, the events table for an event without text), with the message naming it."""
    from petri.web.ui.compare import CompareController
    from petri.web.ui.dish_tab.dish import DishController

    dish = DishController(service)
    compare = CompareController(service, dish)
    base = ["order, person", "calm", "The order was packed.", "tense", "Ninety units in stock.", "{event}", 2, 0, 4,
            dish.spread("order, person"), True, None, None, None, False, None]

    def marked(checks):
        return {i: v["message"] for i, v in enumerate(checks) if not v["is_valid"]}

    assert marked(compare.validate(*base)) == {}
    same_labels = marked(compare.validate(*base[:3], "calm", *base[4:]))
    assert list(same_labels) == [3] and same_labels[3].startswith("labels:")
    no_event_b = marked(compare.validate(*base[:4], "", *base[5:]))
    assert list(no_event_b) == [4] and "events" in no_event_b[4]
    meta, concepts, events, templates = small_study()
    study = [meta, concepts, events, templates, "benign, contradictory", "", ["t1"], 2, 0, 4]
    ctl = StudyController(service)
    assert marked(ctl.validate(*study)) == {}
    none_chosen = marked(ctl.validate(*study[:6], [], *study[7:]))
    assert list(none_chosen) == [6] and none_chosen[6].startswith("templates:")
    blank = events.copy()
    blank.loc[1, "text"] = ""
    blank_event = marked(ctl.validate(*study[:2], blank, *study[3:]))
    assert list(blank_event) == [2] and "events" in blank_event[2]


def test_no_event_of_the_dish_inputs_writes_the_status_line_that_holds_a_refusal(service):
    """Issue 21 item 2: after a refused Run the message Gradio draws on the concept field went away a
    moment later. Gradio 6's frontend keeps that mark in the field's loading status and replaces it
    on the next status update of any event in the page (the slot table's respread or the canvas
    redraw ending just after the refusal, a Shuffle click), so the refusal is also written to the
    status line by the click itself. The ordering that kept it there: the refusal is written by the
    Run click's unqueued event, registered before the queued run, and no event that the dish's
    inputs fire (a concept edit, the slot table, the canvas, Spread / Shuffle, the thought pin)
    writes the status line, so none of them, however late it ends, can take the refusal off."""
    from petri.web.ui.build import build_ui

    demo = build_ui(service)
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    status = by_id["petri-status"]
    run_events = click_events(demo, "petri-run")
    assert [fn.queue for fn in run_events] == [False, True]  # the refusal line first, then the queued run
    assert status in run_events[0].outputs
    inputs = {b._id for b in run_events[1].inputs} | {by_id[i]._id for i in ("petri-canvas", "petri-spread", "petri-shuffle")}
    fired_by_inputs = [fn for fn in demo.fns.values() if any(t[0] in inputs for t in fn.targets)]
    assert len(fired_by_inputs) >= 6  # respread x2, spread, shuffle, table -> canvas, canvas -> table
    assert all(status not in fn.outputs for fn in fired_by_inputs), [fn.name for fn in fired_by_inputs if status in fn.outputs]
