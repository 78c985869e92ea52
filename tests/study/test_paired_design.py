"""The paired (within-event) design: ``conditions`` in the study file, checked on load (every refusal
names its entry), and run on the tiny random model with the same templates, slot positions and seeds
for every condition of an event, resumable per (event, template, condition) batch."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import petri.study.execution.runner as runner
from petri.core.watch import Watch
from petri.runs.store import RunStore
from petri.study.plan import StudyPlan
from petri.study.results.analysis import analyze
from petri.study.schema import StudyError, study_from_dict
from petri.study.transforms import apply_transform, shuffle_words
from tests.study.test_study_run import SETTINGS, one_thread  # noqa: F401 (one intra-op thread, autouse)

SAMPLES = 3
# on the tiny model's tokenizer: order, inventory, person, stock take 1 token each, cat 2, baker 5
PAIRED = {
    "id": "tiny-paired",
    "title": "Tiny paired study",
    "language": "en",
    "concepts": ["order", "inventory", "person", "stock", "cat", "baker"],
    "conditions": [
        {"id": "fitting", "description": "three concepts that fit the event"},
        {"id": "unrelated", "description": "three unrelated concepts"},
        {"id": "same", "description": "identical to fitting"},
    ],
    "templates": [{"id": "t1", "text": "Event: {event}\nDescribe how {concepts} relate."},
                  {"id": "t2", "text": "{event} Explain {concepts}."}],
    "events": [
        {"id": f"e0{i}", "group": "everyday", "text": text, "concepts": ["order", "inventory", "person"],
         "conditions": {"unrelated": {"concepts": ["cat", "stock", "baker"]}}}
        for i, text in enumerate(["A customer placed an order.", "The store counted its inventory.",
                                  "A person checked the shelves."], start=1)
    ],
}
DOSE = {
    "id": "tiny-dose", "title": "Tiny dose study", "language": "en", "concepts": ["order", "inventory", "person"],
    "conditions": [{"id": "d000", "dose": 0}, {"id": "d050", "dose": 0.5}, {"id": "d100", "dose": 1}],
    "templates": [{"id": "t1", "text": "Event: {event}\nDescribe {concepts}."}],
    "events": [{"id": "e01", "group": "everyday", "text": "A customer placed an order.",
                "conditions": {"d050": {"text": "A violin placed an order."}, "d100": {"text": "A violin glued an oven."}}},
               {"id": "e02", "group": "everyday", "text": "The store counted its inventory.",
                "conditions": {"d050": {"text": "The glacier counted its inventory."},
                               "d100": {"text": "The glacier taxed its tuba."}}}],
}


def refused(data: dict) -> str:
    with pytest.raises(StudyError) as info:
        study_from_dict(data, source="s.json")
    return str(info.value)


def edited(**changes) -> dict:
    data = copy.deepcopy(PAIRED)
    data.update(changes)
    return data


# --------------------------------------------------------------------------- the file


def test_a_paired_study_loads_with_one_group_and_resolves_each_condition():
    study = study_from_dict(PAIRED)
    assert study.paired and not study.dose_study
    assert [c.id for c in study.conditions] == ["fitting", "unrelated", "same"]
    assert study.comparison == () and study.show == ()  # one group: no group test
    e = study.events[0]
    assert study.condition_concepts(e, "fitting") == ("order", "inventory", "person")
    assert study.condition_concepts(e, "unrelated") == ("cat", "stock", "baker")  # in the order given
    assert study.condition_text(e, "unrelated") == e.text
    assert study.slot_concepts(e) == ("order", "inventory", "person", "cat", "stock", "baker")
    # the normalised study reloads to the same content (and hash)
    again = study_from_dict(study.to_dict())
    assert again.content_hash() == study.content_hash() and again.conditions == study.conditions


def test_a_dose_study_keeps_its_doses_and_texts():
    study = study_from_dict(DOSE)
    assert study.dose_study and [c.dose for c in study.conditions] == [0.0, 0.5, 1.0]
    assert study.condition_text(study.events[1], "d100") == "The glacier taxed its tuba."
    assert study.condition_text(study.events[1], "d000") == "The store counted its inventory."


def test_an_old_study_keeps_its_content_hash():
    """Adding the conditions to the schema leaves the normalised form of a condition-less study alone."""
    data = {k: v for k, v in DOSE.items() if k != "conditions"}
    data["events"] = [{**{k: v for k, v in e.items() if k != "conditions"}, "group": g}
                      for e, g in zip(DOSE["events"], ["a", "b"])]
    data["events"] += [{"id": "e03", "group": "a", "text": "x y"}, {"id": "e04", "group": "b", "text": "y z"}]
    study = study_from_dict(data)
    assert "conditions" not in study.to_dict() and all("conditions" not in e for e in study.to_dict()["events"])
    assert not study.paired and runner.batch_key("e01", "t1") == "e01::t1"


def test_a_transform_is_a_seeded_shuffle_of_the_event_words():
    data = edited(conditions=[{"id": "plain"}, {"id": "shuffled", "transform": "shuffle_words"}])
    for e in data["events"]:
        del e["conditions"]
    study = study_from_dict(data)
    e = study.events[1]
    shuffled = study.condition_text(e, "shuffled")
    assert shuffled != e.text and sorted(shuffled.split()) == sorted(e.text.split())
    assert shuffled == apply_transform("shuffle_words", e.text, e.id)  # the same every time
    words = e.text.split()
    order = np.random.default_rng(123).permutation(len(words))
    assert shuffle_words(e.text, 123) == " ".join(words[i] for i in order)  # numpy's own permutation
    assert shuffle_words("a b", 0) != "a b" and shuffle_words("same same", 0) == "same same"


@pytest.mark.parametrize("change, message", [
    (dict(conditions=[{"id": "only"}]), "s.json: conditions: must be a list of at least 2"),
    (dict(conditions=[{"id": "a"}, {"id": "a"}]), "conditions[1] (id 'a'): duplicate condition id 'a'"),
    (dict(conditions=[{"id": "a"}, {"id": "b c"}]), "conditions[1] (id 'b c').id: 'b c' is not a valid id"),
    (dict(conditions=[{"id": "a", "dose": 0}, {"id": "b"}]), "conditions[1] (id 'b').dose: a dose is given for ['a']"),
    (dict(conditions=[{"id": "a", "dose": True}, {"id": "b", "dose": 1}]), "conditions[0] (id 'a').dose: must be a finite number"),
    (dict(conditions=[{"id": "a", "dose": 1}, {"id": "b", "dose": 1}]), "conditions: dose 1 is given to more than one"),
    (dict(conditions=[{"id": "a"}, {"id": "b", "transform": "reverse"}]), "conditions[1] (id 'b').transform: unknown transform 'reverse'"),
    (dict(conditions=[{"id": "a"}, {"id": "b", "colour": 1}]), "conditions[1] (id 'b'): unknown key(s) ['colour']"),
])
def test_bad_conditions_are_refused_naming_the_entry(change, message):
    assert message in refused(edited(**change))


def _with_event(i: int, conditions) -> dict:
    data = edited()
    data["events"][i]["conditions"] = conditions
    return data


@pytest.mark.parametrize("i, conditions, message", [
    (2, {"unrelated": {"concepts": ["cat", "stock", "tax"]}},
     "s.json: events[2] (id 'e03').conditions.unrelated.concepts: unknown concept 'tax'; the study's concepts are"),
    (0, {"other": {"concepts": ["cat", "stock", "baker"]}}, "events[0] (id 'e01').conditions.other: unknown condition 'other'"),
    (1, {"same": {"text": "  "}}, "events[1] (id 'e02').conditions.same.text: is empty"),
    (1, {"same": {"txt": "x"}}, "events[1] (id 'e02').conditions.same: unknown key(s) ['txt']"),
    (1, {"unrelated": {"concepts": ["cat", "baker"]}},
     "events[1] (id 'e02').conditions: every condition of one event must pin the same number of concepts"),
    (1, {"unrelated": {"concepts": ["cat", "cat", "baker"]}},
     "events[1] (id 'e02').conditions.unrelated.concepts: duplicate concept 'cat'"),
    (0, ["unrelated"], "events[0] (id 'e01').conditions: must be a JSON object"),
])
def test_bad_event_conditions_are_refused_naming_the_entry(i, conditions, message):
    assert message in refused(_with_event(i, conditions))


def test_event_conditions_need_the_study_conditions_and_one_group_needs_conditions():
    data = edited()
    del data["conditions"]
    assert "events[0] (id 'e01').conditions: the study has no top-level \"conditions\"" in refused(data)
    for e in data["events"]:
        del e["conditions"]
    assert "events: at least two groups are needed" in refused(data)
    assert "events: a paired study needs at least 2 events" in refused(edited(events=PAIRED["events"][:1]))


# --------------------------------------------------------------------------- the run


@pytest.fixture(scope="module")
def paired_run(tiny_lm, tmp_path_factory):
    study = study_from_dict(PAIRED, source="tiny-paired.json")
    store = RunStore(tmp_path_factory.mktemp("paired"))
    return runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=5, settings=SETTINGS), store)


def _batch(result, event_id, template_id, condition):
    return next(b for b in result.batches if (b.event_id, b.template_id, b.condition) == (event_id, template_id, condition))


def test_every_condition_runs_every_event_and_template_with_the_same_seed(paired_run):
    study = paired_run.study
    assert [(b.event_id, b.template_id, b.condition) for b in paired_run.batches] == [
        (e.id, t.id, c.id) for e in study.events for t in study.templates for c in study.conditions]
    for e in study.events:
        for t in study.templates:
            seeds = {_batch(paired_run, e.id, t.id, c.id).seed for c in study.conditions}
            assert seeds == {runner.batch_seed(5, e.id, t.id)}


def test_identical_conditions_give_identical_samples(paired_run):
    for e in paired_run.study.events:
        for t in ("t1", "t2"):
            a, b = _batch(paired_run, e.id, t, "fitting").trajectory, _batch(paired_run, e.id, t, "same").trajectory
            assert a.final_texts == b.final_texts
            assert np.array_equal(a.final_ids, b.final_ids) and np.array_equal(a.argmax, b.argmax)


def test_different_concept_sets_occupy_the_same_slot_positions(paired_run, tiny_lm):
    """cat (2 tokens) and baker (5) would move the slots of an unshared layout; here the i-th concept of
    each condition starts at the same position in every sample."""
    from petri.core.dish import Dish
    from petri.engine.seeding import plan_dish

    study = paired_run.study
    for e in study.events:
        fit_order = study.condition_concepts(e, "fitting")
        unrel_order = study.condition_concepts(e, "unrelated")
        for t in ("t1", "t2"):
            fit = _batch(paired_run, e.id, t, "fitting").trajectory.anchors
            unrel = _batch(paired_run, e.id, t, "unrelated").trajectory.anchors
            for s in range(SAMPLES):
                starts_fit = {a.concept: a.start for a in fit[s]}
                starts_unrel = {a.concept: a.start for a in unrel[s]}
                assert [starts_fit[c] for c in fit_order] == [starts_unrel[c] for c in unrel_order]
    # the unshared layout of the same concepts and seed puts them elsewhere: the sharing is what pairs them
    e = study.events[0]
    seed = runner.batch_seed(5, e.id, "t1")
    _, plain = plan_dish(tiny_lm, Dish(study.condition_concepts(e, "unrelated"), e.text), SAMPLES, SETTINGS, seed)
    shared = _batch(paired_run, e.id, "t1", "unrelated").trajectory.anchors
    assert [[a.start for a in s] for s in plain] != [[a.start for a in s] for s in shared]


def test_per_sample_rows_carry_the_condition_and_the_dose(paired_run, tiny_lm, tmp_path):
    analysis = analyze(paired_run, n_bootstrap=50)
    samples, events = analysis.tables["samples"], analysis.events
    assert list(samples.columns[:5]) == ["study_id", "event_id", "group", "template_id", "condition"]
    assert samples.groupby("condition").size().to_dict() == {c: 3 * 2 * SAMPLES for c in ("fitting", "same", "unrelated")}
    assert len(events) == 3 * 3 and set(events["condition"]) == {"fitting", "unrelated", "same"}
    assert analysis.comparison is None and "dose" not in samples.columns
    same = events.set_index(["event_id", "condition"])["instability"]
    for e in ("e01", "e02", "e03"):
        assert same[(e, "fitting")] == same[(e, "same")]
    dose = study_from_dict(DOSE)
    result = runner.run_study(tiny_lm, StudyPlan(dose, samples=2, seed=0, settings=SETTINGS), RunStore(tmp_path))
    tables = analyze(result, n_bootstrap=50).tables
    assert sorted(tables["samples"]["dose"].unique()) == [0.0, 0.5, 1.0]
    assert list(tables["segments"].columns[4:6]) == ["condition", "dose"]
    assert tables["events"].set_index(["event_id", "condition"]).loc[("e02", "d100"), "event"] == "The glacier taxed its tuba."


def test_a_resumed_paired_run_skips_finished_cells_and_matches(tiny_lm, paired_run, tmp_path):
    study = paired_run.study
    store = RunStore(tmp_path)
    stop_after = 4  # an event's first template done under every condition, and one more cell

    def crash(p):
        if p.done == stop_after:
            raise KeyboardInterrupt("simulated crash")

    with pytest.raises(KeyboardInterrupt):
        runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=5, settings=SETTINGS), store, watch=Watch(progress=crash))
    stored = store.completed_events(paired_run.run_id)
    assert len(stored) == stop_after and all(len(k.split("::")) == 3 for k in stored)
    resumed = runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=5, settings=SETTINGS), store)
    total = len(study.events) * len(study.templates) * len(study.conditions)
    assert resumed.resumed == stop_after and resumed.computed == total - stop_after
    assert [b.key for b in resumed.batches] == [b.key for b in paired_run.batches]
    for x, y in zip(paired_run.batches, resumed.batches):
        assert x.trajectory.final_texts == y.trajectory.final_texts and np.array_equal(x.trajectory.argmax, y.trajectory.argmax)


def test_shared_slots_that_do_not_fit_are_refused_before_sampling(tiny_lm, tmp_path):
    data = edited()
    data["concepts"] = [*data["concepts"], "violin"]  # 6 tokens: 3 slots of 6 do not fit a 16-token canvas
    data["events"][0]["conditions"] = {"unrelated": {"concepts": ["cat", "violin", "baker"]}}
    from petri.core.dish import LayoutError
    with pytest.raises(LayoutError, match="'violin': the paired conditions share 3 slots"):
        runner.run_study(tiny_lm, StudyPlan(study_from_dict(data), samples=1, settings=SETTINGS), RunStore(tmp_path))


def test_the_paired_statistics_read_the_event_means_of_each_condition(paired_run, tmp_path):
    from scipy import stats as sps

    from petri.study.results.report import write_study

    outputs = write_study(paired_run, tmp_path / "out", images=False)
    paired = outputs.analysis.paired
    assert paired.reference == "fitting" and paired.dose_mixed is None and paired.page == []
    events = outputs.analysis.events.pivot(index="event_id", columns="condition", values="instability")
    d = (events["unrelated"] - events["fitting"]).to_numpy()
    unrel = next(c for c in paired.comparisons if (c.value, c.condition_b) == ("instability", "unrelated"))
    assert unrel.n_events == 3 and unrel.median_difference == pytest.approx(float(np.median(d)))
    method = "exact" if unrel.wilcoxon.method == "exact" else "asymptotic"
    assert unrel.wilcoxon.p_value == pytest.approx(sps.wilcoxon(d, zero_method="wilcox", method=method).pvalue)
    same = next(c for c in paired.comparisons if (c.value, c.condition_b) == ("instability", "same"))
    assert same.n_zero == 3 and same.wilcoxon.p_value == 1.0  # identical conditions: no difference at all
    import pandas as pd

    summary = pd.read_csv(tmp_path / "out" / "paired_summary.csv")
    assert list(summary.columns[:4]) == ["value", "condition_a", "condition_b", "n_events"] and len(summary) == 4
    assert "## Paired statistics (within events: the headline)" in outputs.report.read_text()
    means = pd.read_csv(tmp_path / "out" / "paired_event_means.csv")
    assert list(means.columns) == ["event_id", "group", "condition", "instability", "mean_flips_free"] and len(means) == 9


def test_a_dose_study_gets_the_dose_slope_and_pages_test(tiny_lm, tmp_path):
    data = copy.deepcopy(DOSE)
    data["conditions"].append({"id": "d025", "dose": 0.25})
    data["events"].append({"id": "e03", "group": "everyday", "text": "A person checked the shelves."})
    result = runner.run_study(tiny_lm, StudyPlan(study_from_dict(data), samples=2, seed=0, settings=SETTINGS), RunStore(tmp_path))
    paired = analyze(result, n_bootstrap=50).paired
    assert paired.doses == {"d000": 0.0, "d050": 0.5, "d100": 1.0, "d025": 0.25}
    assert paired.dose_mixed is not None and paired.dose_mixed.effect_label == "slope of instability per unit dose"
    assert [p.conditions for p in paired.page] == [("d000", "d025", "d050", "d100")] * 2  # ordered by dose
    assert paired.page[0].n_events == 3


def test_petri_power_and_restat_read_a_paired_folder(paired_run, tmp_path, capsys):
    from scipy import stats as sps

    from petri.cli.main import main
    from petri.study.results.report import write_study

    out = tmp_path / "out"
    outputs = write_study(paired_run, out, images=False)
    (out / "paired_summary.csv").unlink()
    assert main(["power", str(out), "--sims", "40", "--events", "6,12", "--condition", "unrelated", "--seed", "2"]) == 0
    printed = capsys.readouterr().out
    assert "power of the paired Wilcoxon test on instability (unrelated - fitting" in printed
    # the 6-event design, recomputed here from events.csv with scipy on the same draws
    ev = outputs.analysis.events.pivot(index="event_id", columns="condition", values="instability")
    d = (ev["unrelated"] - ev["fitting"]).to_numpy()
    draws = d[np.random.default_rng([2, 6]).integers(0, d.size, size=(40, 6))]
    with np.errstate(all="ignore"):
        p = [sps.wilcoxon(r, zero_method="wilcox", method="asymptotic").pvalue if (r != 0).any() else 1.0 for r in draws]
    assert f"        6  {np.mean(np.nan_to_num(p, nan=1.0) < 0.05):.3f}" in printed
    assert main(["power", str(out), "--templates", "1"]) == 2
    assert "error: --templates: a paired study" in capsys.readouterr().err
    assert main(["restat", str(out)]) == 0
    assert (out / "paired_summary.csv").is_file() and "wrote paired_summary.csv" in capsys.readouterr().out


def test_the_slope_chart_draws_one_line_per_event_coloured_by_direction():
    import pandas as pd

    from petri.study.figures.paired_plots import DIRECTION_COLORS, paired_slope_figure

    events = pd.DataFrame({"event_id": ["e1", "e1", "e2", "e2", "e3", "e3"], "condition": ["a", "b"] * 3,
                           "instability": [1.0, 2.0, 2.0, 1.0, 1.0, 1.0], "event": ["x"] * 6})
    fig = paired_slope_figure(events, ["a", "b"], title="T", run_id="r1")
    lines = [t for t in fig.data if t.name in ("e1", "e2", "e3")]
    assert [(t.name, t.line.color, list(t.y)) for t in lines] == [
        ("e1", DIRECTION_COLORS["up"], [1, 2]), ("e2", DIRECTION_COLORS["down"], [2, 1]), ("e3", DIRECTION_COLORS["flat"], [1, 1])]
    mean = next(t for t in fig.data if t.name == "mean over events")
    assert list(mean.y) == pytest.approx([4 / 3, 4 / 3]) and list(mean.x) == ["a", "b"]
    assert {t.name for t in fig.data} >= {"higher under b: 1 events", "lower under b: 1 events", "equal: 1 events"}
    assert fig.layout.meta["run_id"] == "r1"
    dosed = paired_slope_figure(events, ["a", "b"], doses={"a": 0.0, "b": 0.5})
    assert list(dosed.data[0].x) == [0.0, 0.5] and dosed.layout.xaxis.title.text == "dose"


def test_petri_paired_matches_two_runs_of_a_paired_study_on_event_and_condition(paired_run, tmp_path):
    from petri.study.results.paired_runs import compare_runs
    from petri.study.results.report import write_study

    for name in ("a", "b"):
        write_study(paired_run, tmp_path / name, images=False)
    out = compare_runs(tmp_path / "a", tmp_path / "b")
    assert out["wilcoxon"]["n_pairs"] == 3 * 3 and out["wilcoxon"]["n_nonzero"] == 0  # (event, condition) units
    assert out["mcnemar"]["n_pairs"] == 3 * 2 * 3 * SAMPLES


def test_a_paired_study_with_two_groups_tests_the_groups_under_the_reference_condition(tiny_lm, tmp_path):
    data = copy.deepcopy(PAIRED)
    data["templates"] = data["templates"][:1]
    data["events"] += [{"id": f"k0{i}", "group": "other", "text": text, "concepts": ["order", "inventory", "person"]}
                       for i, text in enumerate(["A clerk filed the order.", "The shop sold its stock.",
                                                 "A person closed the till."], start=1)]
    study = study_from_dict(data)
    assert study.comparison == ("everyday", "other")
    result = runner.run_study(tiny_lm, StudyPlan(study, samples=2, seed=1, settings=SETTINGS), RunStore(tmp_path))
    analysis = analyze(result, n_bootstrap=50)
    ev = analysis.events[analysis.events.condition == "fitting"]
    assert analysis.comparison.event.n_a == 3 and analysis.comparison.event.n_b == 3
    assert analysis.comparison.event.median_a == pytest.approx(ev[ev.group == "everyday"].instability.median())
    assert any("reference condition 'fitting'" in n for n in analysis.notes) and analysis.paired is not None
