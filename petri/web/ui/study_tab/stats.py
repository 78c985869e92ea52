"""The Study tab's reviewer panel: the per-pair event-level tests (raw, Holm and BH p-values; small
groups flagged) of the study on screen, and a power planner that simulates designs from it as a pilot,
as ``petri power RESULTS_DIR`` does: the between-group design (:func:`petri.stats.power.power_from_cells`),
or for a paired (within-event) study the paired Wilcoxon test on the pilot's per-event differences
(:func:`petri.study.results.paired_statistics.paired_from_folder`, :func:`petri.stats.paired_power.paired_power`).

The panel reads the output folder of the study shown (the shipped study's, then each finished run's),
kept in a ``gr.State`` that the Study tab's final view updates (:func:`stats_views`). Every result in
it names its run: the pair table's label, and the power estimate's text and table label
(:func:`run_power`); when another run comes on screen the power estimate is cleared
(:func:`power_cleared`), and an estimate that lands after that says it is not of the run on screen
(:func:`power_still_current`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from petri.stats.groups import MIN_INFORMATIVE_N
from petri.stats.mixed import cell_values
from petri.stats.power import power_from_cells
from petri.study.results.paired_statistics import paired_from_folder
from petri.study.results.statistics import load_results

PAIR_VIEW = ["pair", "n_a", "n_b", "rank_biserial", "ci_low", "ci_high", "p_value", "p_holm", "p_bh", "informative",
             "note"]
MAX_SIMS = 2000


def pairs_view(folder: str | Path | None) -> pd.DataFrame | None:
    """``pair_tests.csv`` of ``folder`` for the table (None when there is none)."""
    path = Path(folder) / "pair_tests.csv" if folder else None
    if path is None or not path.is_file():
        return None
    df = pd.read_csv(path).fillna({"note": ""})
    return df[[c for c in PAIR_VIEW if c in df.columns]].round(4)


def run_of(folder: str | Path | None) -> str:
    """The run id of the study written to ``folder`` (its ``run.json``), or ``""``."""
    try:
        return str(json.loads((Path(folder) / "run.json").read_text(encoding="utf-8"))["run_id"]) if folder else ""
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def power_cleared(run_id: str, why: str) -> dict:
    """The power panel's text and table cleared for study run ``run_id`` (``why``: when it can be estimated)."""
    return {"power": f"Power from study run `{run_id}` as a pilot: {why}.",
            "power_table": gr.update(value=None, visible=False, label=f"Power per design (pilot: run {run_id})")}


def stats_views(folder: str | Path) -> dict:
    """The panel's updates for a study written to ``folder`` (merged into the Study tab's final views):
    its pair table and folder, the power estimate of another run cleared."""
    return {"pairs": pairs_view(folder), "results_dir": str(folder),
            **power_cleared(run_of(folder), "press **Estimate power**")}


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in (text or "").replace(" ", "").split(",") if v)
    except ValueError:
        raise gr.Error(f"{name}: comma-separated whole numbers, e.g. 6,12,24") from None
    if any(v < 1 for v in values) or len(values) > 8:
        raise gr.Error(f"{name}: at most 8 values, each at least 1")
    return values


def _effect(text) -> float | None:
    """The Effect box: empty (or None) means the pilot's own effect; otherwise a finite number."""
    if text is None or not str(text).strip():
        return None
    try:
        value = float(str(text).strip().replace("\u2212", "-"))
    except ValueError:
        raise gr.Error(f"effect: a number such as 0.1 or -0.05, or empty for the pilot's effect; got {text!r}") from None
    if not math.isfinite(value):
        raise gr.Error(f"effect: a finite number, or empty for the pilot's effect; got {text!r}")
    return value


def run_power(folder: str | None, events: str, templates: str, effect, sims,
              seed) -> tuple[pd.DataFrame, str, str | None]:
    """The power table (with each design's size), its summary naming the pilot run, the method, and
    the pilot's folder, for the study in ``folder`` as the pilot. ``effect``: the Effect box's text
    (empty: the pilot's own effect)."""
    if not folder:
        raise gr.Error("Power: no study results on screen yet; run or reopen a study first")
    try:
        design: dict[str, Any] = dict(events=_ints(events, "events per group") or (6, 12, 24, 48),
                      templates=_ints(templates, "templates") or None, n_sims=min(int(sims or 500), MAX_SIMS),
                      seed=int(seed or 0))
        table, summary = paired_power_of(folder, design, _effect(effect))
        if table is None:  # the between-group design
            segments, groups, _, _ = load_results(folder)
            result = power_from_cells(cell_values(segments), groups, effect=_effect(effect), **design)
            table, summary = result.table(), f"**{result.summary()}.**\n\n{SIZE_NOTE}\n\nMethod: {result.method}."
    except ValueError as err:
        raise gr.Error(f"Power: {err}") from None
    run_id = run_of(folder)
    return (gr.update(value=table.round(4), visible=True, label=f"Power per design (pilot: run {run_id})"),
            f"**Pilot: study run `{run_id}`.** {summary}", str(folder))


def paired_power_of(folder: str | Path, design: dict, effect: float | None) -> tuple[pd.DataFrame | None, str]:
    """The power of a paired study's folder (as ``petri power`` gives it: the last condition against the
    reference, from the pilot's per-event differences): its table (n_events, power, mc_se) and text;
    ``(None, "")`` for a study without conditions. ``design``: the panel's events, templates (refused:
    the paired design resamples events), sims and seed. Raises ValueError naming the bad field."""
    paired = paired_from_folder(folder, n_sims=design["n_sims"], power_events=design["events"], effect=effect,
                                seed=design["seed"])
    if paired is None:
        return None, ""
    if design["templates"] is not None:
        raise ValueError("templates: a paired study's power resamples events (templates as in the pilot); "
                         "leave Templates empty")
    result = paired.power
    if result is None:
        raise ValueError("; ".join(paired.notes))
    return pd.DataFrame(result.designs), f"**{result.summary()}.**\n\n{PAIRED_NOTE}\n\nMethod: {result.method}."


def power_still_current(shown: str | None, estimated: str | None, text: str):
    """The power text, marked when the estimate (of the study in ``estimated``) landed after another
    run (``shown``) came on screen."""
    if not estimated or shown == estimated:
        return gr.update()
    return (f"**⚠ Not the run on screen:** this estimate is of study run `{run_of(estimated)}`; the run on screen "
            f"is `{run_of(shown) or 'none yet'}`. Press **Estimate power** again.\n\n{text}")


#: What a paired study's power is of (the panel's Events box counts events, each under every condition).
PAIRED_NOTE = ("A paired study: each simulated study draws that many events' differences (last condition minus "
               "the reference) from this run's and runs the paired Wilcoxon signed-rank test; `Events per group` "
               "is the number of events, each run under every condition; templates and samples stay as in the pilot.")

#: What the ``size`` columns are, and why the test's size can exceed alpha.
SIZE_NOTE = (
    "`size`: how often the same simulated studies (the same draws) reject with the groups' means made equal, "
    "with its Wilson 95% interval (`size_low`, `size_high`); `size_held`: at most 1.5 × alpha (Bradley's liberal "
    "criterion). A design whose size is not held is never recommended. The size can exceed 5 %: the effect is a "
    "shift of the mean, while the Mann-Whitney test compares ranks, so groups whose events differ in spread or "
    "skew still differ at equal means; and with few templates, the templates drawn carry their own group "
    "difference (a template × group interaction) that more templates average out."
)


def build_stats_panel(folder: str | Path | None) -> dict:
    """The panel's components (inside the Study tab); returns those the final views update by name."""
    results_dir = gr.State(str(folder) if folder else None)
    estimated = gr.State(None)  # the folder of the study the power estimate on screen is of
    run_id = run_of(folder)
    with gr.Accordion("Per-pair comparisons (event level, Holm and Benjamini-Hochberg)", open=False):
        gr.Markdown(f"One Mann-Whitney test per concept pair on the event values of that pair's segments; Holm "
                    f"controls the family-wise error rate, BH the false discovery rate. A pair with a group below "
                    f"{MIN_INFORMATIVE_N} events is marked `informative = False`: its test and interval mean nothing.")
        pairs = gr.Dataframe(pairs_view(folder), label=f"Pairs of run {run_id} (pair_tests.csv)" if run_id else
                             "Pairs (pair_tests.csv)", interactive=False, wrap=True, elem_id="petri-study-pairs")
    with gr.Accordion("Power from this study as a pilot", open=False):
        gr.Markdown("Simulates studies by resampling this study's events (within group) and templates, and "
                    "counts how often the event-level Mann-Whitney test rejects at 5%; for a paired study "
                    "(conditions), resamples its events' differences between the last condition and the "
                    "reference and counts how often the paired Wilcoxon test rejects. Leave the effect empty "
                    "to use the pilot's.")
        with gr.Row():
            events = gr.Textbox("6, 12, 24, 48", label="Events per group (a paired study: events)")
            templates = gr.Textbox("", label="Templates (empty: 1, the pilot's, twice)")
            effect = gr.Textbox("", label="Effect (empty: the pilot's)", elem_id="petri-study-power-effect",
                                placeholder="the pilot's effect",
                                info="Difference of the groups' mean event-level instability (mean flips per "
                                     "free position between two adjacent anchors), second group minus first; a paired "
                                     "study: the mean over events of last condition minus the reference")
            sims = gr.Slider(100, MAX_SIMS, value=500, step=100, label="Simulated studies per design")
            seed = gr.Number(0, precision=0, label="Seed")
        power_btn = gr.Button("Estimate power", size="sm", elem_id="petri-study-power-run")
        cleared = power_cleared(run_id, "press **Estimate power**") if run_id else {"power": "", "power_table": None}
        power_text = gr.Markdown(cleared["power"], elem_id="petri-study-power")
        power_table = gr.Dataframe(None, label=f"Power per design (pilot: run {run_id})" if run_id else "Power per design",
                                   interactive=False, visible=False, elem_id="petri-study-power-table")
    power_btn.click(run_power, [results_dir, events, templates, effect, sims, seed], [power_table, power_text, estimated],
                    concurrency_limit=1, concurrency_id="power").then(
        power_still_current, [results_dir, estimated, power_text], power_text, show_progress="hidden")
    return {"pairs": pairs, "results_dir": results_dir, "power": power_text, "power_table": power_table}


def paired_tests_line(a, b, labels: tuple[str, str]) -> str:
    """The Compare view's paired tests of two trajectories whose sample ``s`` share layout and seed:
    Wilcoxon signed-rank on per-sample mean segment instability, exact McNemar on "every anchor intact"."""
    from petri.measure.summary import EventSummary
    from petri.measure.tables import samples_table, segments_table
    from petri.stats.paired import mcnemar_exact, wilcoxon_paired

    events = [EventSummary(t) for t in (a, b)]  # each event's flips counted once for both tables
    inst = [segments_table(e).groupby("sample")["instability"].mean().reindex(range(e.traj.n_samples)) for e in events]
    tables = [samples_table(e) for e in events]
    intact = [(s["anchors_intact"] == s["n_anchors"]).to_numpy() for s in tables]
    w = wilcoxon_paired(inst[0].to_numpy(float), inst[1].to_numpy(float))
    m = mcnemar_exact(intact[0], intact[1])
    return f"Paired tests over samples: {w.summary(labels)}; {m.summary('every anchor intact', labels)}."
