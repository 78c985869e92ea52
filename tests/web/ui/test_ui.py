"""The UI's handlers without a browser: the dish run streams live heatmaps before its results, the
validator names the bad field, the Study tab runs a small study end to end through the runner,
analysis, figures and report, and ``python app.py`` fails cleanly on a missing model."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import plotly.graph_objects as go
import pytest

from petri.app.service import PetriService
from petri.core.watch import NO_WATCH
from petri.runs.store import RunStore
from petri.study.schema import StudyError
from petri.web.ui.dish_tab.dish import DishController
from petri.web.ui.study_tab.study import StudyController, builtin_studies, fields_to_study, study_to_fields
from petri.web.ui.views import highlighted_text, parse_concepts
from study_support import study_fields, tab_study


def dish_inputs(ctl: DishController, concepts="order, inventory, person", **changes):
    """The Dish tab's inputs in its handlers' order: the dish, then the served family's setting
    controls (``ctl.setting_names``; one not named here is None, the model's default)."""
    values = {
        "concepts": concepts, "event": "Only 90 units are in stock.", "template": "{event}", "samples": 3,
        "seed": 2, "placement": ctl.spread(concepts), "shuffle": True, "steps": 5, "entropy_bound": 0.1,
        "t_min": 0.4, "t_max": 0.8, "adaptive": False, "pin_thought": True,
    }
    values.update(changes)
    dish = ("concepts", "event", "template", "samples", "seed", "placement", "shuffle")
    return [values[k] for k in dish] + [values.get(k) for k in ctl.setting_names]


def test_dish_run_streams_then_reports(service):
    ctl = DishController(service)
    updates = list(ctl.run(*dish_inputs(ctl)))
    cleared, live, final = updates[0], updates[1:-1], updates[-1]
    # a Run first empties every result panel, so nothing of an earlier run stays beside this one
    assert cleared["heatmap"] is None and cleared["flips"] is None and cleared["files"] is None
    assert cleared["run_id"] == "" and cleared["final_text"]["value"] == [] and cleared["pairs"].empty
    assert cleared["traj_view"] == {"note": "Sampling: the trajectory follows."} and cleared["traj_figure"] is None
    assert "now sampling" in cleared["run_badge"]
    assert live and all(set(u) == {"status", "heatmap", "traj_view"} for u in live)
    assert all(u["traj_view"]["live"] and u["traj_view"]["steps"] >= 1 for u in live)  # the trajectory view follows
    assert "while sampling" in live[0]["heatmap"].layout.title.text
    assert "Done" in final["status"] and isinstance(final["heatmap"], go.Figure)
    run_id = final["run_id"]
    assert run_id in final["run_badge"] and final["heatmap"].layout.title.text.startswith(f"run {run_id[:12]}")
    assert final["traj_view"]["title"].startswith(f"run {run_id[:12]}")  # each panel names its run
    traj = service.store.load_events(run_id)[0][2]
    assert traj.n_samples == 3 and traj.steps.tolist() == [5, 5, 5]
    names = {p.rsplit("/", 1)[-1] for p in final["files"]}
    assert names == {f"{run_id}-{n}" for n in ("positions.csv", "segments.csv", "samples.csv", "pairs.csv", "run.json")}
    positions = pd.read_csv(next(p for p in final["files"] if p.endswith("positions.csv")))
    assert len(positions) == 3 * 16 and positions["group"].isna().all()
    assert list(final["pairs"].columns) == ["pair", "segments", "instability"]  # issue 60: headers whole at 420 px
    labelled = [label for _, label in highlighted_text(traj, 1, ctl.tokens) if label]
    assert {"order", "inventory", "person"} <= set(labelled)
    picked = ctl.show_sample(run_id, 2)  # one selector for every panel: the viewer follows it
    assert set(picked) == {"final_text", "flips", "traj_view", "traj_key", "traj_figure", "traj_curves", "traj_files",
                           "traj_sample"}
    assert picked["traj_view"]["sample"] == 2 and picked["traj_sample"] == 2
    assert final["traj_view"]["ids"] == traj.argmax[0].tolist() and not final["traj_view"]["live"]


def test_the_live_view_draws_the_newest_step_when_sampling_pauses(tiny_lm, tmp_path):
    """Steps that come faster than the redraw interval are held back, not lost: when sampling pauses
    after step 3 (a slow step, or here a held one), the live view shows step 3 before the run goes on."""
    import threading

    paused, go_on = threading.Event(), threading.Event()

    class PausingService(PetriService):
        def submit_seed(self, plan, *, owner=None, watch=NO_WATCH):
            def held(step):
                watch.on_step(step)
                if step.index == 2:  # the third step: steps 1-3 came within a few ms of each other
                    paused.set()
                    go_on.wait(30)

            return super().submit_seed(plan, owner=owner, watch=replace(watch, on_step=held))

    ctl = DishController(PausingService(tiny_lm, RunStore(tmp_path / "store")))
    shown = []
    for update in ctl.run(*dish_inputs(ctl)):
        if "traj_view" in update and update["traj_view"].get("live"):
            shown.append(update["traj_view"]["steps"])
            if paused.is_set() and shown[-1] == 3:
                go_on.set()  # the view reached the paused step: let the sampler finish
    go_on.set()
    assert 3 in shown, shown


def test_dish_validator_names_the_field(service):
    ctl = DishController(service)
    assert all(v["is_valid"] for v in ctl.validate(*dish_inputs(ctl)))
    bad = ctl.validate(*dish_inputs(ctl, concepts="order", placement=ctl.spread("order")))
    assert not bad[0]["is_valid"] and bad[0]["message"] == "concepts: at least 2 are needed, got 1"  # a sentence, not pydantic's
    bad = ctl.validate(*dish_inputs(ctl, template="Event: {evnt}"))
    assert not bad[2]["is_valid"] and bad[2]["message"].startswith("template:")
    overlapping = pd.DataFrame({"concept": ["order", "inventory", "person"], "start": [3, 3, 9], "tokens": [1, 1, 1]})
    bad = ctl.validate(*dish_inputs(ctl, placement=overlapping))
    assert not bad[5]["is_valid"] and "overlaps" in bad[5]["message"]
    bad = ctl.validate(*dish_inputs(ctl, t_min=-1))
    assert not bad[9]["is_valid"] and "t_min" in bad[9]["message"]


def test_placement_helpers(service):
    ctl = DishController(service)
    assert parse_concepts(" order, ,person ") == ["order", "", "person"]
    spread = ctl.spread("order, person")
    assert list(spread["concept"]) == ["order", "person"] and spread["start"].is_monotonic_increasing
    # shuffling three concepts: every row keeps its concept's token count, the spans stay in canvas
    # order without overlapping, and over 200 shuffles all 3! = 6 orders appear (an identity
    # "shuffle" gives one; the chance that a fair one misses an order is below 1e-14)
    three = ctl.spread("order, inventory, person")
    tokens = dict(zip(three["concept"], three["tokens"]))
    orders = set()
    for _ in range(200):
        shuffled = ctl.shuffle(three)
        assert sorted(shuffled["concept"]) == ["inventory", "order", "person"]
        assert [tokens[c] for c in shuffled["concept"]] == list(shuffled["tokens"])
        ends = shuffled["start"] + shuffled["tokens"]
        assert (shuffled["start"].iloc[1:].to_numpy() >= ends.iloc[:-1].to_numpy()).all() and ends.iloc[-1] <= 16
        orders.add(tuple(shuffled["concept"]))
    assert len(orders) == 6, orders
    assert "overlaps" in ctl.canvas(pd.DataFrame({"concept": ["order", "person"], "start": [4, 4]}))["error"]


def small_study_fields():
    """The Study tab's small study, its event c2 with concepts of its own."""
    return study_fields(tab_study(c2="order, person"))


def test_study_tab_runs_a_study(service):
    meta, concepts, events, templates = small_study_fields()
    *_, final = StudyController(service).run(meta, concepts, events, templates, "benign, contradictory", "",
                                             ["t1", "t2"], 2, 0, 3)
    assert all(isinstance(final[k], go.Figure) for k in ("instability", "events"))
    assert isinstance(final["jaccard"]["value"], go.Figure) and final["jaccard"]["visible"]  # two templates or more
    assert "Headline (event level" in final["stats"] and "Segment level" in final["stats"]
    assert list(final["groups"]["value"]["group"]) == ["benign", "contradictory"]
    names = {p.rsplit("/", 1)[-1] for p in final["files"]["value"]}
    assert {"positions.csv", "segments.csv", "samples.csv", "events.csv", "pairs.csv", "report.md"} <= names
    assert final["report"].startswith("#")
    assert not service.busy


def test_study_fields_are_checked_by_the_study_schema():
    meta, concepts, events, templates = small_study_fields()
    study = fields_to_study(meta, concepts, events, templates, "benign, contradictory", "")
    assert study.events[3].concepts == ("order", "person")
    bad = events.copy()
    bad.loc[1, "id"] = "b1"
    with pytest.raises(StudyError, match="duplicate event id"):
        fields_to_study(meta, concepts, bad, templates, "", "")
    with pytest.raises(StudyError, match=r"templates\[0\].*placeholder"):
        fields_to_study(meta, concepts, events, templates.replace("Event: {event}", "Event: {evnt}"), "", "")


def test_bundled_studies_load_into_the_tables():
    studies = builtin_studies()
    if not studies:
        pytest.skip("no bundled study files")
    from petri.study.schema import load_study

    # the tab opens on the study whose committed results it shows (the paired studies sort before it by name)
    assert next(iter(studies)) == "inventory_order.json"
    for name, path in studies.items():
        study = load_study(path)
        meta, concepts, events, templates, comparison, show, ids = study_to_fields(study)
        assert len(events) >= 4 and ids, name
        assert ("," in comparison) == (len(study.groups) >= 2), name
        again = fields_to_study(meta, concepts, events, templates, comparison, show)
        assert (again.id, len(again.events), again.conditions) == (study.id, len(study.events), study.conditions), name


def test_app_main_reports_a_missing_model(tmp_path, capsys):
    import app

    assert app.main(["--model", str(tmp_path / "nope"), "--store", str(tmp_path / "runs")]) == 2
    assert "was not found" in capsys.readouterr().err
