"""The study runner on a tiny random model: deterministic, resumable after a crash without
recomputing finished batches, with order-independent per-batch seeds; then the analysis, the
figures and the report."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

import petri.study.execution.executors as executors
import petri.study.execution.runner as runner
from petri.app.service import BusyError
from petri.core.dish import LayoutError
from petri.core.trajectory import SamplerSettings
from petri.core.watch import Watch
from petri.measure.nouns import FALLBACK, FUGASHI, KIWI, tagger_name, top_nouns_by_template
from petri.runs.store import RunStore
from petri.study.figures.plots import flips_bar, save_figures
from petri.study.figures.plots import sample_flip_heatmap as flip_heatmap
from petri.study.plan import StudyPlan
from petri.study.results.analysis import analyze, clean_text, cluster_bootstrap_mean, study_tables
from petri.study.results.report import render_report, sidecar, write_study
from petri.study.schema import study_from_dict
from service_support import model_held

SETTINGS = SamplerSettings(max_denoising_steps=4)
SAMPLES = 3
STUDY = {
    "id": "tiny-study",
    "title": "Tiny study",
    "language": "en",
    "concepts": ["order", "inventory", "person"],
    "comparison": {"groups": ["benign", "contradictory"], "show": ["control"]},
    "templates": [
        {"id": "t1", "text": "Event: {event}\nDescribe how {concepts} relate."},
        {"id": "t2", "text": "{event} Explain {concepts}."},
    ],
    "events": [
        {"id": "b1", "group": "benign", "text": "A customer placed an order."},
        {"id": "b2", "group": "benign", "text": "The store counted its inventory."},
        {"id": "b3", "group": "benign", "text": "A person checked the stock.", "concepts": ["inventory", "person"]},
        {"id": "c1", "group": "contradictory", "text": "Only 90 units are in stock, but 120 were ordered."},
        {"id": "c2", "group": "contradictory", "text": "The order shipped 50 boxes from 30 in stock."},
        {"id": "c3", "group": "contradictory", "text": "A buyer returned 5 lamps never sold."},
        {"id": "k1", "group": "control", "text": "Only 90 units are in stock, and 60 were ordered."},
        {"id": "k2", "group": "control", "text": "The order shipped 30 boxes from 50 in stock."},
    ],
}
N_BATCHES = len(STUDY["events"]) * len(STUDY["templates"])


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core machine, two spinning threads are ~10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def study():
    return study_from_dict(STUDY, source="tiny-study.json")


@pytest.fixture(scope="module")
def full(tiny_lm, study, tmp_path_factory):
    """An uninterrupted run."""
    store = RunStore(tmp_path_factory.mktemp("full"))
    return runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=7, settings=SETTINGS), store)


@pytest.fixture(scope="module")
def analysis(full):
    return analyze(full, n_bootstrap=200)


def count_seed_dish(monkeypatch) -> list[str]:
    calls: list[str] = []
    original = executors.seed_dish

    def counting(lm, dish, *args, **kwargs):
        calls.append(dish.event)
        return original(lm, dish, *args, **kwargs)

    monkeypatch.setattr(executors, "seed_dish", counting)
    return calls


def loop_flips(history, spans) -> list[int]:
    """Reference flips of one sample: ``history`` (steps, L) raw argmax; a change between consecutive
    steps counts 1, positions covered by ``spans`` (its anchors) count 0. Plain loops."""
    pinned = {i for a in spans for i in range(a.start, a.end)}
    flips = [0] * history.shape[1]
    for t in range(1, history.shape[0]):
        for i in range(history.shape[1]):
            if i not in pinned and history[t, i] != history[t - 1, i]:
                flips[i] += 1
    return flips


def loop_event_instability(batches, event_id: str) -> float:
    """Reference event-level value: the mean, over every non-empty segment (gap between neighbouring
    anchors) of every sample of every template of the event, of the mean flips over the gap."""
    values = []
    for b in batches:
        if b.event_id != event_id:
            continue
        for s, spans in enumerate(b.trajectory.anchors):
            flips = loop_flips(b.trajectory.sample_argmax(s), spans)
            ordered = sorted(spans, key=lambda a: a.start)
            for left, right in zip(ordered, ordered[1:]):
                gap = flips[left.end:right.start]
                if gap:
                    values.append(sum(gap) / len(gap))
    return sum(values) / len(values) if values else float("nan")


def assert_same_numbers(a, b):
    ta, tb = study_tables(a.batches, a.study.id), study_tables(b.batches, b.study.id)
    for name in ta:
        pd.testing.assert_frame_equal(ta[name], tb[name], check_exact=True)


def test_plan_order_and_batches(full, study):
    assert [(b.event_id, b.template_id) for b in full.batches] == [(e.id, t.id) for e in study.events for t in study.templates]
    assert full.computed == N_BATCHES and full.resumed == 0
    assert all(b.trajectory.n_samples == SAMPLES for b in full.batches)
    assert full.batches[4].trajectory.anchors[0] and {a.concept for a in full.batches[4].trajectory.anchors[0]} == {"inventory", "person"}
    assert len(full.run_id) == 24 and full.run_id == full.run_id.lower()
    assert full.model_id == "tiny-random-seed0"


def test_crash_then_resume_skips_finished_batches_and_matches(tiny_lm, study, full, tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    per_event = len(study.templates)

    def crash(p):
        if p.done == per_event:  # as many batches as an event has templates are stored
            raise KeyboardInterrupt("simulated crash")

    with pytest.raises(KeyboardInterrupt):
        runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=7, settings=SETTINGS), store, watch=Watch(progress=crash))
    assert len(store.completed_events(full.run_id)) == per_event  # same run id as the uninterrupted run
    assert store.get_run(full.run_id)["status"] == "interrupted"  # Ctrl-C: resumable, not a failure

    stored_first = [tuple(k.split("::")) for k in store.completed_events(full.run_id)]
    assert len(stored_first) == per_event
    calls = count_seed_dish(monkeypatch)
    seen = []
    resumed = runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=7, settings=SETTINGS), store,
                               watch=Watch(progress=seen.append))
    texts = {e.id: e.text for e in study.events}
    assert len(calls) == N_BATCHES - per_event
    for event_id, _ in stored_first:  # each stored batch's event was sampled again only for its other templates
        assert calls.count(texts[event_id]) == len(study.templates) - sum(e == event_id for e, _ in stored_first)
    assert resumed.computed == N_BATCHES - per_event and resumed.resumed == per_event
    assert [p.skipped for p in seen] == [True] * per_event + [False] * (N_BATCHES - per_event)
    assert seen[-1].done == seen[-1].total == N_BATCHES
    assert store.get_run(full.run_id)["status"] == "done"
    assert_same_numbers(full, resumed)

    # A third run computes nothing.
    calls.clear()
    again = runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=7, settings=SETTINGS), store)
    assert calls == [] and again.computed == 0
    assert_same_numbers(full, again)


def test_run_id_depends_on_everything_that_fixes_the_numbers(tiny_lm, study, full):
    fp = tiny_lm.fingerprint()
    base = dict(study=study, model_id=tiny_lm.model_id, settings=SETTINGS, samples=SAMPLES, seed=7, template_ids=("t1", "t2"),
                fingerprint=fp)
    assert runner.study_run_id(**base) == full.run_id
    for change in (dict(seed=8), dict(samples=4), dict(settings=SamplerSettings(max_denoising_steps=5)), dict(template_ids=("t1",)),
                   dict(fingerprint="x")):
        assert runner.study_run_id(**{**base, **change}) != full.run_id
    assert runner.batch_seed(7, "b1", "t1") == runner.batch_seed(7, "b1", "t1") != runner.batch_seed(7, "t1", "b1")


def test_batch_seeds_do_not_depend_on_run_order(tiny_lm, study, full, tmp_path):
    # Running only template t2 gives exactly the t2 batches of the full run.
    part = runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=7, settings=SETTINGS, templates=["t2"]), RunStore(tmp_path))
    assert part.run_id != full.run_id and [b.template_id for b in part.batches] == ["t2"] * len(study.events)
    for b in part.batches:
        ref = next(x for x in full.batches if x.key == b.key)
        np.testing.assert_array_equal(b.trajectory.argmax, ref.trajectory.argmax)
        assert b.seed == ref.seed and b.trajectory.anchors == ref.trajectory.anchors


def test_a_concept_set_that_does_not_fit_fails_before_sampling(tiny_lm, tmp_path, monkeypatch):
    data = {**STUDY, "concepts": ["order", "inventory", "person", "supercalifragilisticexpialidocious warehouse"]}
    data["events"] = [dict(e, concepts=["order", "person"]) if e["id"] != "c3" else dict(e) for e in STUDY["events"]]
    study = study_from_dict(data)
    calls = count_seed_dish(monkeypatch)
    with pytest.raises(LayoutError, match="anchor tokens but the canvas has"):
        runner.run_study(tiny_lm, StudyPlan(study, samples=2, settings=SETTINGS), RunStore(tmp_path))
    assert calls == []


def test_service_runs_a_study_under_the_lock(study, service):
    result = service.run_study(StudyPlan(study, samples=1, settings=SETTINGS, templates=["t1"]))
    assert result.computed == len(study.events) and not service.busy
    with model_held(service), pytest.raises(BusyError):
        service.run_study(StudyPlan(study, samples=1, settings=SETTINGS, templates=["t1"]))


# --------------------------------------------------------------------------- analysis


def test_tables_carry_group_labels(analysis, full):
    seg, smp, pos, ev = (analysis.tables[k] for k in ("segments", "samples", "positions", "events"))
    assert list(seg.columns[:4]) == ["study_id", "event_id", "group", "template_id"]
    assert len(smp) == N_BATCHES * SAMPLES and len(pos) == N_BATCHES * SAMPLES * full.batches[0].trajectory.canvas_length
    assert set(seg["group"]) == {"benign", "contradictory", "control"}
    assert list(ev["event_id"]) == [e["id"] for e in STUDY["events"]]
    expected = [loop_event_instability(full.batches, e["id"]) for e in STUDY["events"]]
    np.testing.assert_allclose(ev["instability"], expected, rtol=1e-12)
    assert ((ev["ci_low"] <= ev["instability"] + 1e-12) & (ev["instability"] <= ev["ci_high"] + 1e-12)).all()


def test_headline_is_event_level_with_segment_level_beside(analysis):
    c = analysis.comparison
    assert c.event.unit == "event" and (c.event.n_a, c.event.n_b) == (3, 3)
    assert c.segment.unit == "segment" and "non-independent" in c.segment.summary()
    assert c.segment.n_a > c.event.n_a
    assert [(s.group_a, s.group_b) for s in analysis.secondary] == [("benign", "control"), ("control", "contradictory")]


def test_preservation_convergence_and_template_sensitivity(analysis, full):
    # reference counts by plain loops over the batches
    intact = agreement_sum = anchors = 0
    for b in full.batches:
        t = b.trajectory
        for s, (text, spans) in enumerate(zip(t.final_texts, t.anchors)):
            history = t.sample_argmax(s)
            for a in spans:
                anchors += 1
                intact += re.search(rf"(?<!\w){re.escape(a.concept)}(?!\w)", text) is not None
                agreement_sum += np.mean([list(row[a.start:a.end]) == list(a.token_ids) for row in history])
    pres = analysis.preservation
    assert pres["anchors_total"] == anchors and pres["anchors_intact"] == intact
    assert pres["samples_total"] == N_BATCHES * SAMPLES
    assert pres["mean_agreement"] == pytest.approx(agreement_sum / anchors, rel=1e-12)
    steps = [int(x) for b in full.batches for x in b.trajectory.steps]
    conv = analysis.convergence
    assert conv["max_denoising_steps"] == 4 and conv["samples"] == N_BATCHES * SAMPLES
    assert conv["mean_steps"] == pytest.approx(sum(steps) / len(steps), rel=1e-12)
    assert conv["stopped_early_share"] == pytest.approx(sum(x < 4 for x in steps) / len(steps), rel=1e-12)
    assert list(analysis.jaccard.index) == ["t1", "t2"] and analysis.jaccard.loc["t1", "t1"] == 1.0
    top1, top2 = set(analysis.top_nouns["t1"]), set(analysis.top_nouns["t2"])
    assert analysis.jaccard.loc["t1", "t2"] == pytest.approx(len(top1 & top2) / len(top1 | top2))
    assert analysis.jaccard_mean == analysis.jaccard.loc["t1", "t2"]
    assert analysis.tagger == tagger_name() and "Pattern tagger" in analysis.tagger
    assert analysis.notes == []  # an English study: no tagger caveat
    json.dumps(analysis.to_dict())  # the sidecar summary is JSON-serialisable


@pytest.mark.parametrize("language, method, name", [("ko", KIWI, "kiwipiepy"), ("ja", FUGASHI, "unidic-lite")])
def test_korean_and_japanese_studies_use_their_noun_analysers(full, analysis, tmp_path, language, method, name):
    """A Korean / Japanese study (as assets/studies/inventory_order_{ko,ja}.json) extracts its nouns
    with its own analyser, named with its version in report.md and run.json, and carries no
    word-level caveat; the English study keeps the Pattern tagger."""
    translated = dataclasses.replace(full, study=dataclasses.replace(full.study, language=language))
    result = analyze(translated, n_bootstrap=20)
    assert result.tagger == tagger_name(method) and name in result.tagger
    assert result.notes == []
    texts = {t: [clean_text(x) for b in full.batches if b.template_id == t for x in b.trajectory.final_texts] for t in full.template_ids}
    assert result.top_nouns == top_nouns_by_template(texts, n=result.top_n, method=method)
    report = render_report(translated, result, {}, tmp_path)
    assert f"Tagger: {result.tagger}." in report and "word-level" not in report and "English-only" not in report
    assert sidecar(translated, result, [])["tagger"] == result.tagger
    assert "Pattern tagger" in render_report(full, analysis, {}, tmp_path)


def test_a_word_level_study_is_labelled_in_the_report(full, tmp_path):
    """A study that asks for the word-level fallback ("nouns": "words", e.g. a language with no
    analyser) gets it, labelled in the analysis notes and in report.md."""
    words = dataclasses.replace(full, study=dataclasses.replace(full.study, language="fr", nouns="words"))
    result = analyze(words, n_bootstrap=20)
    assert result.tagger == tagger_name(FALLBACK)
    caveat = "template sensitivity uses the word-level fallback, not a noun analyser"
    assert len(result.notes) == 1 and result.notes[0].startswith(caveat) and "on fr text" in result.notes[0]
    assert caveat in render_report(words, result, {}, tmp_path).split("## Notes", 1)[1]


def test_clean_text_and_cluster_bootstrap():
    assert clean_text("<|channel>thought\n<channel|>The order<pad><eos>").split() == ["The", "order"]
    rng = np.random.default_rng(0)
    # means of 4 draws from {1, 2, 3, 4}: P(mean <= 1.25) = 5/256 < 2.5% < P(mean <= 1.5) = 15/256,
    # so the 2.5% and 97.5% points lie at 1.25-1.5 and 3.5-3.75 (500 resamples, interpolated)
    low, high = cluster_bootstrap_mean(np.array([1.0, 2.0, 3.0, 4.0]), np.ones(4), 500, 0.95, rng)
    assert 1.25 <= low <= 1.5 and 3.5 <= high <= 3.75, (low, high)
    # clusters (sum 1, count 1) and (sum 6, count 2): resamples give 1, 3 (1/4 each) or 7/3 (1/2,
    # the ratio of the sums; a mean of per-cluster ratios would give 2); the 30% and 70% points are 7/3
    low, high = cluster_bootstrap_mean(np.array([1.0, 6.0]), np.array([1.0, 2.0]), 2000, 0.4, np.random.default_rng(1))
    assert low == pytest.approx(7 / 3) and high == pytest.approx(7 / 3)
    assert np.isnan(cluster_bootstrap_mean(np.array([1.0]), np.ones(1), 10, 0.95, rng)[0])


# --------------------------------------------------------------------------- figures and report


def test_one_sample_figures(full, tiny_lm, tmp_path):
    traj = full.batches[0].trajectory
    heat = flip_heatmap(traj, 1, tokenizer=tiny_lm.tokenizer)
    hist = traj.sample_argmax(1)
    z = np.asarray(heat.data[0].z)
    assert z.shape == hist.shape and not z[0].any()
    np.testing.assert_array_equal(z[1:], (hist[1:] != hist[:-1]).astype(int))
    assert np.asarray(heat.data[0].customdata).shape == hist.shape
    bar = flips_bar(traj, 1)
    np.testing.assert_array_equal(np.asarray(bar.data[0].y), loop_flips(hist, traj.anchors[1]))
    anchor_labels = {a.text.strip("<b>/") for a in bar.layout.annotations}
    assert {a.concept for a in traj.anchors[1]} <= anchor_labels
    with pytest.raises(ValueError, match="sample must be in"):
        flips_bar(traj, SAMPLES)
    paths, _ = save_figures({"heat": heat}, tmp_path, images=())
    assert set(paths["heat"]) == {"html"}


def test_image_failures_never_fail_the_run(monkeypatch, tmp_path):
    import petri.study.figures.plots as plots

    monkeypatch.setattr(plots, "_IMAGE_STATUS", (True, "pretend"))

    def broken(*args, **kwargs):
        raise RuntimeError("no browser here")

    monkeypatch.setattr("plotly.io.write_images", broken)
    paths, notes = save_figures({"f": go.Figure()}, tmp_path, images=("png",))
    assert set(paths["f"]) == {"html"} and "no browser here" in notes[0]


def test_write_study_outputs(full, analysis, tmp_path):
    out = write_study(full, tmp_path / "out", images=False, analysis=analysis, command="python -m petri study tiny.json")
    for name in ("positions", "segments", "samples", "events", "pairs", "jaccard"):
        assert (tmp_path / "out" / f"{name}.csv").stat().st_size > 0
    events = pd.read_csv(tmp_path / "out" / "events.csv")
    assert len(events) == len(STUDY["events"]) and {"instability", "ci_low", "ci_high", "group"} <= set(events.columns)
    for name in ("instability", "events", "jaccard"):
        html = (tmp_path / "out" / "figures" / f"{name}.html").read_text()
        assert html.lstrip().lower().startswith(("<!doctype html>", "<html")) and "Plotly.newPlot" in html
        assert html.rstrip().endswith("</html>")
    meta = json.loads((tmp_path / "out" / "run.json").read_text())
    assert meta["model_id"] == "tiny-random-seed0" and meta["seed"] == 7 and meta["samples_per_batch"] == SAMPLES
    assert meta["settings"]["max_denoising_steps"] == 4 and meta["tagger"] and "torch" in meta["versions"]
    assert meta["study_file"] == "tiny-study.json" and meta["run_id"] == full.run_id and meta["started_at"]
    assert set(meta["batch_seeds"]) == {b.key for b in full.batches}
    report = out.report.read_text()
    assert "## Headline (event level: the independent unit)" in report
    assert analysis.comparison.event.summary() in report
    assert "segment level (non-independent)" in report
    assert "not for DiffusionGemma" in report and "tiny-random-seed0" in report
    assert "Mean off-diagonal Jaccard" in report and "Anchor preservation" in report and "Convergence" in report
    assert "figures/instability.html" in report


def test_batches_run_with_the_groups_interleaved(tiny_lm, study, full, tmp_path):
    """The run order (not the stored order): template t1 first for every event, and within it the
    groups take turns, the compared pair first (benign, contradictory, control, ...), each group's
    events in a seeded order; the same study and seed give the same order, and the stored batches
    (and so the numbers) do not depend on it."""
    seen = []
    result = runner.run_study(tiny_lm, StudyPlan(study, samples=SAMPLES, seed=7, settings=SETTINGS), RunStore(tmp_path),
                              watch=Watch(progress=seen.append))
    ran = [(p.event_id, p.template_id) for p in seen]
    assert sorted(ran) == sorted((e.id, t.id) for e in study.events for t in study.templates)
    assert [t for _, t in ran] == ["t1"] * 8 + ["t2"] * 8
    group = {e.id: e.group for e in study.events}
    # 3 benign, 3 contradictory, 2 control events: turns b c k b c k b c
    assert [group[e] for e, _ in ran[:8]] == ["benign", "contradictory", "control"] * 2 + ["benign", "contradictory"]
    assert [group[e] for e, _ in ran[8:]] == [group[e] for e, _ in ran[:8]]
    # the first provisional group comparison needs 2 events in each compared group: after batch 5 of 16
    first_two_each = ran.index(next(x for x in ran if group[x[0]] == "contradictory" and
                                    sum(group[e] == "contradictory" for e, _ in ran[:ran.index(x) + 1]) == 2)) + 1
    assert first_two_each == 5
    assert_same_numbers(full, result)
    # the order is fixed by (study, seed): another seed reorders some group's events, not the groups' turns
    jobs = [runner.BatchJob(i, runner.batch_key(e.id, t.id), e.id, t.id, e.group, None, SAMPLES, SETTINGS, 0)
            for i, (e, t) in enumerate((e, t) for e in study.events for t in study.templates)]
    order = lambda seed: [(j.event_id, j.template_id) for j in runner.batch_order(jobs, study, seed)]  # noqa: E731
    assert order(7) == ran and order(7) == order(7)
    assert len({tuple(order(s)) for s in range(6)}) > 1
    assert all([group[e] for e, _ in order(s)] == [group[e] for e, _ in ran] for s in range(6))
