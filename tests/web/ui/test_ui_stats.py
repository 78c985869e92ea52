"""Issue 23 in the Study tab (no browser): the finished study's view carries the per-pair table (small
groups flagged) and its results folder for the power panel; the power panel simulates from the study
on screen; the shipped study's panel is filled when the tab opens; provisional statistics warn."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

from petri.web.ui.study_tab.stats import pairs_view, run_power
from petri.web.ui.study_tab.study import StudyController
from study_support import study_fields, tab_study

SHIPPED = Path(__file__).resolve().parents[3] / "assets" / "studies" / "results" / "inventory_order-en-petri-tiny"


def test_finished_study_view_has_flagged_pairs_and_its_folder(service):
    meta, concepts, events, templates = study_fields(tab_study())
    *_, final = StudyController(service).run(meta, concepts, events, templates,
                                                "benign, contradictory", "", ["t1", "t2"], 2, 0, 3)
    # 2 events per group: the headline and every pair are uninformative, not printed as a result
    assert "UNINFORMATIVE" in final["stats"] and "95% CI" not in final["stats"].split("Segment level")[0]
    pairs = final["pairs"]["value"]  # the final view names its run in the table's label
    assert str(final["pairs"]["label"]).startswith("Pairs of run ")
    assert len(pairs) == 3 and not pairs["informative"].any()
    folder = Path(final["results_dir"])
    assert (folder / "statistics.json").is_file() and (folder / "pair_tests.csv").is_file()
    report = final["report"]
    assert "mixed model not fitted" in report or "## Templates and events" in report
    # a provisional view (fewer batches than planned) carries the peeking warning; the final one does not
    from types import SimpleNamespace

    from petri.web.ui.study_tab.study import fields_to_study

    study = fields_to_study(meta, concepts, events, templates, "benign, contradictory", "")
    run_id = final["status"].split("`")[1]
    ctl = StudyController(service)
    planned_more = ctl.live_views(study, run_id, ("t1", "t2"), SimpleNamespace(max_denoising_steps=3), 0, 16)
    assert "inflates the false-positive rate" in planned_more["stats"]
    assert "inflates the false-positive rate" not in ctl.live_views(
        study, run_id, ("t1", "t2"), SimpleNamespace(max_denoising_steps=3), 0, 8)["stats"]


def power(*args):
    """run_power's table (a DataFrame) and text."""
    update, text, _ = run_power(*args)
    return update["value"], text


def test_power_panel_simulates_from_the_study_on_screen():
    update, text, folder = run_power(str(SHIPPED), "6, 12", "1, 5", None, 100, 0)
    table = update["value"]
    assert list(table["n_events"]) == [6, 12, 6, 12] and table["power"].between(0, 1).all()
    assert "Method: simulation from the pilot" in text
    # issue 60: the text and the table name the pilot run; the folder goes back for the staleness check
    assert text.startswith("**Pilot: study run `d894fb59657f4120473aeb68`.**") and folder == str(SHIPPED)
    assert update["label"] == "Power per design (pilot: run d894fb59657f4120473aeb68)" and update["visible"]
    # issue 49 / 60: the size (rate at effect 0) beside each design's power, from the same simulation at effect 0
    from petri.stats.mixed import cell_values
    from petri.stats.power import power_from_cells
    from petri.study.results.statistics import load_results

    segments, groups, _, _ = load_results(SHIPPED)
    null = power_from_cells(cell_values(segments), groups, events=(6, 12), templates=(1, 5), effect=0.0, n_sims=100, seed=0)
    assert table["size"].tolist() == null.table()["power"].round(4).tolist()
    assert {"size_low", "size_high", "size_held"} <= set(table.columns)
    assert "`size`" in text and "ranks" in text and "template × group" in text and "never recommended" in text
    again, _ = power(str(SHIPPED), "6, 12", "1, 5", None, 100, 0)
    pd.testing.assert_frame_equal(table, again)
    with pytest.raises(gr.Error, match="events per group"):
        run_power(str(SHIPPED), "six", "", None, 100, 0)
    with pytest.raises(gr.Error, match="no study results"):
        run_power(None, "6", "", None, 100, 0)


def test_a_power_estimate_of_another_run_is_cleared_or_marked(tmp_path):
    """Issue 60 item 1: a new run on screen clears the estimate (naming the new run); an estimate that
    lands after another run came on screen says it is not of the run on screen."""
    from petri.web.ui.study_tab.stats import power_cleared, power_still_current, stats_views
    from petri.web.ui.study_tab.study import pending_views

    pending = pending_views("f" * 24, 2, 6)
    assert pending["results_dir"] is None and "f" * 24 in pending["power"] and "all 6 batches" in pending["power"]
    assert pending["power_table"]["value"] is None and not pending["power_table"]["visible"]
    final = stats_views(SHIPPED)
    assert "d894fb59657f4120473aeb68" in final["power"] and final["power_table"]["value"] is None
    assert power_cleared("abc", "x")["power"] == "Power from study run `abc` as a pilot: x."
    _, text, folder = run_power(str(SHIPPED), "6", "1", None, 100, 0)
    assert power_still_current(str(SHIPPED), folder, text) == gr.update()  # still the run on screen: unchanged
    marked = power_still_current(None, folder, text)  # a new run started meanwhile (no results yet)
    assert marked.startswith("**⚠ Not the run on screen:**") and "d894fb59657f4120473aeb68" in marked
    assert marked.endswith(text)


def test_power_panel_empty_effect_means_the_pilots():
    """Issue 49: the Effect box pre-filled 0 and the answer read "for effect +0 (given)". Empty now
    means the pilot's own effect; a typed number is used as given; anything else names the field."""
    _, text = power(str(SHIPPED), "6", "1", "", 100, 0)
    assert "(the pilot's)" in text and "(given)" not in text
    _, text_none = power(str(SHIPPED), "6", "1", None, 100, 0)
    assert text_none == text
    _, given = power(str(SHIPPED), "6", "1", "0", 100, 0)
    assert "for effect +0 (given)" in given
    _, unicode_minus = power(str(SHIPPED), "6", "1", "\u22120.5", 100, 0)
    assert "for effect -0.5 (given)" in unicode_minus
    with pytest.raises(gr.Error, match="effect"):
        run_power(str(SHIPPED), "6", "1", "big", 100, 0)
    with pytest.raises(gr.Error, match="finite"):
        run_power(str(SHIPPED), "6", "1", "nan", 100, 0)


def test_shipped_pairs_table():
    df = pairs_view(SHIPPED)
    assert list(df["pair"]) == ["inventory|order", "inventory|person", "order|person"]
    assert {"p_value", "p_holm", "p_bh", "informative"} <= set(df.columns) and df["informative"].all()
    assert pairs_view(None) is None


def test_compare_view_gives_the_paired_tests(service):
    from scipy import stats as sps

    from petri.measure.tables import samples_table, segments_table
    from petri.web.ui.compare import CompareController
    from petri.web.ui.dish_tab.dish import DishController

    ctl = CompareController(service, DishController(service))
    *_, final = ctl.run("order, inventory, person", "benign", "The order was packed.", "contradictory",
                        "Ninety units in stock, none in stock.", "{event}", 8, 4, 5)
    (_, _, a), (_, _, b) = service.store.load_events(final["run_id"])
    text = final["summary"]
    assert "Wilcoxon signed-rank (8 pairs" in text and "exact McNemar on every anchor intact (8 pairs)" in text
    # independently: scipy's Wilcoxon on the per-sample differences, when there are enough of them
    ia, ib = (segments_table(t).groupby("sample")["instability"].mean().to_numpy() for t in (a, b))
    d = ib - ia
    if (d != 0).sum() >= 6:
        assert f"p={sps.wilcoxon(d).pvalue:.3g}" in text
    ka, kb = ((samples_table(t)["anchors_intact"] == samples_table(t)["n_anchors"]).to_numpy() for t in (a, b))
    assert f"only {int((ka & ~kb).sum())}, in contradictory only {int((~ka & kb).sum())}" in text


def test_a_mixed_model_that_did_not_converge_says_so_beside_the_headline():
    """Issue 49 item 13: a mixed model that did not converge printed its Wald p with no caveat, and only
    in the collapsed report. Its effect now shows beside the headline, and a fit that did not converge
    is named as such first."""
    from types import SimpleNamespace

    from petri.web.ui.study_tab.study import mixed_model_lines

    fit = SimpleNamespace(effect=0.1234, se=0.05, p_value=0.0213, converged=True)
    stats = SimpleNamespace(mixed=fit, groups=("benign", "contradictory"))
    _, line = mixed_model_lines(stats)
    assert line.startswith("Mixed model") and "contradictory − benign = +0.1234" in line and "p = 0.0213" in line
    assert "converge" not in line
    fit.converged = False
    _, line = mixed_model_lines(stats)
    assert line.startswith("**Caveat: the mixed model did NOT converge**") and "p = 0.0213" in line
    assert mixed_model_lines(SimpleNamespace(mixed=None, groups=("a", "b"))) == []


#: made-up per-event differences (condition b minus the reference a), dyadic so every mean is exact
DIFFERENCES = [0.25, 0.5, 0.125, 0.375, 0.625, -0.125, 0.75, 0.25]


def paired_folder(tmp_path: Path) -> Path:
    """A paired study's folder written by hand: 8 events x 2 templates x conditions a, b, one segment and
    one sample per cell; under b every cell is its a value plus the event's difference."""
    import json

    seg, smp = [], []
    for i, d in enumerate(DIFFERENCES):
        for t, offset in (("t1", 0.0), ("t2", 0.5)):
            for condition, shift in (("a", 0.0), ("b", d)):
                key = {"event_id": f"e{i:02d}", "group": "everyday", "template_id": t, "condition": condition, "sample": 0}
                seg.append({**key, "instability": i / 4 + offset + shift})
                smp.append({**key, "mean_flips_free": i / 8 + shift})
    pd.DataFrame(seg).to_csv(tmp_path / "segments.csv", index=False)
    pd.DataFrame(smp).to_csv(tmp_path / "samples.csv", index=False)
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "0123456789abcdef01234567", "seed": 0,
                                                   "study": {"conditions": [{"id": "a"}, {"id": "b"}]}}))
    return tmp_path


def test_the_power_panel_of_a_paired_study_uses_the_paired_design(tmp_path):
    """The panel reads a paired folder as ``petri power`` does: the paired Wilcoxon test on the events'
    differences; each design's power recomputed here with scipy on the documented draws, the effect by hand."""
    import numpy as np
    from scipy import stats as sps

    folder = paired_folder(tmp_path)
    update, text, back = run_power(str(folder), "6, 12", "", None, 200, 3)
    table = update["value"]
    assert back == str(folder) and update["label"] == "Power per design (pilot: run 0123456789abcdef01234567)"
    assert list(table.columns) == ["n_events", "power", "mc_se"] and list(table["n_events"]) == [6, 12]
    d = np.array(DIFFERENCES)
    for n, got in zip((6, 12), table["power"]):
        draws = d[np.random.default_rng([3, n]).integers(0, d.size, size=(200, n))]
        with np.errstate(all="ignore"):
            p = [sps.wilcoxon(r, zero_method="wilcox", method="asymptotic").pvalue for r in draws]
        assert got == pytest.approx(round(float(np.mean(np.nan_to_num(p, nan=1.0) < 0.05)), 4)), n
    assert text.startswith("**Pilot: study run `0123456789abcdef01234567`.** **power of the paired Wilcoxon test on "
                           "instability (b - a, two-sided alpha 0.05) for a mean difference of +0.3438 (the pilot's), "
                           "8 pilot events, 200 simulated studies per design, seed 3")  # 2.75 / 8 = 0.34375
    assert "Mann-Whitney" not in text and "size_held" not in text
    shifted, _ = power(str(folder), "6", "", "0", 200, 3)  # effect 0: the differences centred on zero
    assert shifted["power"].iloc[0] < table["power"].iloc[0]
    with pytest.raises(gr.Error, match="templates: a paired study's power resamples events"):
        run_power(str(folder), "6", "2", None, 200, 3)
