"""The subject ladder of the Validity page (issue 59): the positive controls, the shipped study and the
teacher's line, side by side, computed with scipy and statsmodels from the stored per-event results.

    python3 experiments/validity_stats.py         # writes experiments/results/validity_ladder.json, prints the tables

Inputs (whatever exists; a missing run is reported as not run):

* ``experiments/results/validity/anchor_congruence-<model>-<condition>/events.csv`` and
  ``dose_response-<model>-<condition>/events.csv`` (``experiments/validity_runs.py``): the per-event
  mean pair instability (``instability``) under each condition, paired by event;
* the shipped study's runs (``assets/studies/results/inventory_order-en-petri-tiny``,
  ``experiments/results/inventory_order-en-<model>``): per-event instability by group;
* ``experiments/results/teacher_reference.json`` (``experiments/teacher_reference.py``).

The statistics, each on events (the unit):

* **congruence**: unrelated minus fitting per event: mean with a 95 % t interval; petri's paired
  comparison (``petri.stats.within``: Wilcoxon signed-rank, exact for up to 50 non-zero differences
  without ties, the Hodges-Lehmann estimate with its interval, the matched-pairs rank-biserial
  correlation); Cohen's d_z and the events a paired t-test needs for 80 % power at
  alpha 0.05 for that d_z (statsmodels ``TTestPower``);
* **dose**: each event's least-squares slope of instability on the dose (mean with a 95 % t interval,
  d_z of the slopes and the events for 80 % power, as above), Page's L test for instability
  increasing with the dose (``petri.stats.within.page_trend``) and a mixed model (statsmodels
  ``MixedLM``: instability ~ dose, random intercept per event);
* **contradictory vs benign / vs control**: AUC = P(a contradictory event is less stable than the
  other group's), its two-sided Mann-Whitney p, Cohen's d of the event means and the events per group
  an independent t-test needs for 80 % power (``TTestIndPower``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
RESULTS = REPO / "experiments" / "results"
VALIDITY = RESULTS / "validity"
MODELS = ("petri-tiny", "petri-small", "petri-tiny-mdm", "petri-small-mdm")
CONGRUENCE = ("fitting", "unrelated")
DOSES = (("d000", 0.0), ("d025", 0.25), ("d050", 0.5), ("d100", 1.0))


def read_events(folder: Path) -> dict[str, dict]:
    """event id -> row of ``folder/events.csv`` (``{}`` when the run is missing)."""
    path = folder / "events.csv"
    if not path.exists():
        return {}
    with path.open(encoding="utf-8") as f:
        return {row["event_id"]: row for row in csv.DictReader(f)}


def _power_n(effect: float, paired: bool) -> float | None:
    """Events (pairs, or per group) for 80 % power at alpha 0.05, two-sided; None for no effect."""
    from statsmodels.stats.power import TTestIndPower, TTestPower

    if not math.isfinite(effect) or abs(effect) < 1e-9:
        return None
    solver = TTestPower() if paired else TTestIndPower()
    try:
        return float(solver.solve_power(effect_size=abs(effect), alpha=0.05, power=0.8, alternative="two-sided"))
    except (ValueError, RuntimeError):
        return None


def mean_ci(values: np.ndarray) -> dict:
    """Mean, 95 % t interval, d_z and the events for 80 % power of a one-sample t-test."""
    n = len(values)
    sd = float(values.std(ddof=1))
    half = float(stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n))
    dz = float(values.mean() / sd) if sd > 0 else float("nan")
    return {"n": n, "mean": float(values.mean()), "ci95": [float(values.mean()) - half, float(values.mean()) + half],
            "d_z": dz, "n_for_80pct_power": _power_n(dz, paired=True)}


def paired_test(after: np.ndarray, before: np.ndarray) -> dict:
    """``after - before`` per event: :func:`mean_ci` of the differences, and petri's own paired
    comparison (``petri.stats.within.paired_comparison``: exact Wilcoxon signed-rank, Hodges-Lehmann
    estimate with its interval, matched-pairs rank-biserial)."""
    from petri.stats.within import paired_comparison

    pc = paired_comparison(before, after, labels=("reference", "condition"))
    return {**mean_ci(after - before), "hodges_lehmann": pc.hodges_lehmann, "hl_ci95": [pc.hl_low, pc.hl_high],
            "wilcoxon_p": pc.wilcoxon.p_value, "wilcoxon_method": pc.wilcoxon.method,
            "rank_biserial": pc.rank_biserial, "share_up": pc.share_b_higher}


def condition_values(study: str, model: str, condition: str) -> tuple[dict[str, float], dict]:
    """Per-event instability of one condition's run and where it came from: the finished run's
    ``events.csv``, else the batches the run store holds of a run cut short
    (``validity_runs.stored_events``)."""
    folder = VALIDITY / f"{study}-{model}-{condition}"
    rows = read_events(folder)
    if rows:
        first = next(iter(rows.values()))
        return ({k: float(r["instability"]) for k, r in rows.items()},
                {"source": str(folder.relative_to(REPO)), "finished": True, "samples_per_event": int(first["n_samples"])})
    from validity_runs import stored_events

    stored = stored_events(study, model, condition)
    if not stored:
        return {}, {}
    return ({k: v["instability"] for k, v in stored.items()},
            {"source": f"runs/store (run of {study}.{condition} on {model}, cut short)", "finished": False,
             "events": len(stored), "samples_per_event": next(iter(stored.values()))["n_samples"]})


def congruence(model: str) -> dict | None:
    runs = {c: condition_values("anchor_congruence", model, c) for c in CONGRUENCE}
    ids = sorted(set(runs["fitting"][0]) & set(runs["unrelated"][0]))
    if len(ids) < 6:
        return None
    fit = np.array([runs["fitting"][0][i] for i in ids])
    unrel = np.array([runs["unrelated"][0][i] for i in ids])
    return {"effect": "unrelated minus fitting, mean pair instability per event", **paired_test(unrel, fit),
            "mean_fitting": float(fit.mean()), "mean_unrelated": float(unrel.mean()), "events": ids,
            "runs": {c: runs[c][1] for c in CONGRUENCE}, "secondary": secondary("anchor_congruence", model),
            "values": {"fitting": fit.tolist(), "unrelated": unrel.tolist()}}


SECONDARY = {"mean_flips_free": lambda r: float(r["mean_flips_free"]),
             "anchors_intact_share": lambda r: int(r["anchors_intact"]) / int(r["anchors_total"])}


def secondary(study: str, model: str) -> dict | None:
    """Unrelated minus fitting on the other per-event measures of ``events.csv`` (flips per free
    position, the share of anchors found intact in the final text), where both runs finished."""
    rows = {c: read_events(VALIDITY / f"{study}-{model}-{c}") for c in CONGRUENCE}
    if not all(rows.values()):
        return None
    ids = sorted(set(rows["fitting"]) & set(rows["unrelated"]))
    return {name: paired_test(np.array([get(rows["unrelated"][i]) for i in ids]), np.array([get(rows["fitting"][i]) for i in ids]))
            for name, get in SECONDARY.items()}


def trend(table: np.ndarray, x: np.ndarray) -> dict:
    """``table``: (events, doses) values, ``x``: the doses. Each event's least-squares slope on the
    dose (:func:`mean_ci` of them), Page's L test for values increasing with the dose, the means by dose."""
    from petri.stats.within import page_trend

    slopes = ((x - x.mean()) * (table - table.mean(1, keepdims=True))).sum(1) / ((x - x.mean()) ** 2).sum()
    page = page_trend(table)
    return {"slope": mean_ci(slopes), "page_L": page.statistic, "page_p": page.p_value,
            "page_method": page.method, "mean_by_dose": [float(v) for v in table.mean(0)]}


def dose(model: str) -> dict | None:
    runs = {cid: condition_values("dose_response", model, cid) for cid, _ in DOSES}
    levels = [(cid, x) for cid, x in DOSES if len(runs[cid][0]) >= 6]
    if len(levels) < 3:
        return None
    ids = sorted(set.intersection(*(set(runs[cid][0]) for cid, _ in levels)))
    if len(ids) < 6:
        return None
    table = np.array([[runs[cid][0][i] for cid, _ in levels] for i in ids])
    x = np.array([v for _, v in levels])
    return {"effect": "least-squares slope of mean pair instability on the dose (0 to 1) per event",
            "doses": [v for _, v in levels], **trend(table, x), "mixed_model": mixed_slope(table, x, ids),
            "n_events": len(ids), "events": ids, "runs": {cid: runs[cid][1] for cid, _ in levels},
            "values": {cid: table[:, j].tolist() for j, (cid, _) in enumerate(levels)}}


def mixed_slope(table: np.ndarray, x: np.ndarray, ids: list[str]) -> dict:
    """statsmodels MixedLM instability ~ dose with a random intercept per event, on event means."""
    import pandas as pd
    import statsmodels.formula.api as smf

    frame = pd.DataFrame([{"event": e, "dose": float(v), "y": float(table[r, c])}
                          for r, e in enumerate(ids) for c, v in enumerate(x)])
    fit = smf.mixedlm("y ~ dose", frame, groups=frame["event"]).fit(reml=True)
    low, high = fit.conf_int().loc["dose"]
    return {"slope": float(fit.params["dose"]), "ci95": [float(low), float(high)], "p": float(fit.pvalues["dose"])}


def inventory_folder(model: str) -> Path:
    shipped = REPO / "assets" / "studies" / "results" / f"inventory_order-en-{model}"
    return shipped if shipped.exists() else RESULTS / f"inventory_order-en-{model}"


def group_test(high: np.ndarray, low: np.ndarray) -> dict:
    """AUC P(high > low), two-sided Mann-Whitney p (exact without ties, as the study's own headline),
    Cohen's d and the events per group for 80 % power."""
    tied = len(np.unique(np.concatenate([high, low]))) < len(high) + len(low)
    res = stats.mannwhitneyu(high, low, alternative="two-sided", method="asymptotic" if tied else "exact")
    pooled = math.sqrt(((len(high) - 1) * high.var(ddof=1) + (len(low) - 1) * low.var(ddof=1)) / (len(high) + len(low) - 2))
    d = float((high.mean() - low.mean()) / pooled)
    return {"auc": float(res.statistic) / (len(high) * len(low)), "p": float(res.pvalue), "n": [len(high), len(low)],
            "cohens_d": d, "n_per_group_for_80pct_power": _power_n(d, paired=False)}


def inventory(model: str) -> dict | None:
    folder = inventory_folder(model)
    rows = read_events(folder)
    if not rows:
        return None
    by = {g: np.array([float(r["instability"]) for r in rows.values() if r["group"] == g])
          for g in ("benign", "contradictory", "control")}
    run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    return {"contradictory_vs_benign": group_test(by["contradictory"], by["benign"]),
            "contradictory_vs_control": group_test(by["contradictory"], by["control"]),
            "samples_per_batch": run["samples_per_batch"], "templates": len(run["templates"]),
            "folder": str(folder.relative_to(REPO))}


def ladder() -> dict:
    teacher_path = RESULTS / "teacher_reference.json"
    return {
        "command": "python3 experiments/validity_stats.py",
        "models": {m: {"congruence": congruence(m), "dose": dose(m), "inventory_order": inventory(m)} for m in MODELS},
        "teacher": teacher(json.loads(teacher_path.read_text(encoding="utf-8"))) if teacher_path.exists() else None,
    }


def teacher(raw: dict) -> dict:
    """The teacher's tests, as ``experiments/teacher_reference.py`` wrote them (with this module's
    functions), and where they came from."""
    keep = ("inventory_order", "anchor_congruence", "dose_response")
    return {"source": "experiments/results/teacher_reference.json", "command": raw["command"],
            **{k: {key: v for key, v in raw[k].items() if key != "events"} for k in keep}}


def _fmt(v: float | None, digits: int = 2) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:+.{digits}f}" if digits else f"{v:.0f}"


def _n(v: float | None) -> str:
    """Events for 80 % power, rounded up."""
    return "—" if v is None or not math.isfinite(v) else str(math.ceil(v))


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows])


def _per_model(result: dict):
    """(model, congruence, dose, inventory_order) per model of the ladder."""
    for model, r in result["models"].items():
        yield model, r["congruence"], r["dose"], r["inventory_order"]


def table(result: dict) -> str:
    """The ladder as a Markdown table (one row per model)."""
    rows = []
    for model, c, d, inv in _per_model(result):
        cong = (f"{_fmt(c['mean'])} [{_fmt(c['ci95'][0])}, {_fmt(c['ci95'][1])}], p = {_p(c['wilcoxon_p'])} "
                f"({c['n']} events)") if c else "not run"
        slope = (f"{_fmt(d['slope']['mean'])} [{_fmt(d['slope']['ci95'][0])}, {_fmt(d['slope']['ci95'][1])}], "
                 f"p = {_p(d['page_p'])} ({d['n_events']} events, doses {', '.join(f'{v:g}' for v in d['doses'])})") if d else "not run"
        groups = [f"{inv[k]['auc']:.2f}, p = {_p(inv[k]['p'])}" if inv else "—"
                  for k in ("contradictory_vs_benign", "contradictory_vs_control")]
        rows.append([model, cong, _n(c["n_for_80pct_power"]) if c else "—", slope,
                     _n(d["slope"]["n_for_80pct_power"]) if d else "—", *groups])
    return _markdown(["model", "congruence: unrelated − fitting [95 % CI], Wilcoxon p", "events for 80 %",
                      "dose slope [95 % CI], Page p", "events for 80 %", "contradictory vs benign: AUC, p",
                      "contradictory vs control: AUC, p"], rows)


def power_table(result: dict) -> str:
    """Effect sizes and the events for 80 % power (alpha 0.05, two-sided), one row per model."""
    rows = []
    for model, c, d, inv in _per_model(result):
        cells = [model, _fmt(c["d_z"]) if c else "—", _n(c["n_for_80pct_power"]) if c else "—",
                 _fmt(d["slope"]["d_z"]) if d else "—", _n(d["slope"]["n_for_80pct_power"]) if d else "—"]
        for key in ("contradictory_vs_benign", "contradictory_vs_control"):
            cells += [_fmt(inv[key]["cohens_d"]), _n(inv[key]["n_per_group_for_80pct_power"])] if inv else ["—", "—"]
        rows.append(cells)
    return _markdown(["model", "congruence d_z", "events (pairs) for 80 %", "dose-slope d_z", "events for 80 %",
                      "contradictory vs benign d", "events per group for 80 %", "contradictory vs control d",
                      "events per group for 80 %"], rows)


def teacher_table(t: dict) -> str:
    """The teacher's line as a Markdown table (one row per read)."""
    inv, cong, dose_part = t["inventory_order"], t["anchor_congruence"], t["dose_response"]
    rows = []
    for label, ckey, key in (("p(No), Yes/No read", "fit_p_no", "p_no"), ("NLL per token (nats)", "concept_nll", "nll")):
        c, d = cong[ckey]["unrelated_minus_fitting"], dose_part[key]
        rows.append([label, f"{_fmt(c['mean'])} [{_fmt(c['ci95'][0])}, {_fmt(c['ci95'][1])}], p = {_p(c['wilcoxon_p'])}",
                     _n(c["n_for_80pct_power"]),
                     f"{_fmt(d['slope']['mean'])} [{_fmt(d['slope']['ci95'][0])}, {_fmt(d['slope']['ci95'][1])}], p = {_p(d['page_p'])}",
                     *[f"{inv[key][k]['auc']:.2f}, p = {_p(inv[key][k]['p'])}"
                       for k in ("contradictory_vs_benign", "contradictory_vs_control")]])
    return _markdown(["teacher read", "congruence: unrelated − fitting [95 % CI], Wilcoxon p", "events for 80 %",
                      "dose slope [95 % CI], Page p", "contradictory vs benign: AUC, p", "contradictory vs control: AUC, p"], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "validity_ladder.json")
    args = ap.parse_args(argv)
    result = ladder()
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(table(result))
    print()
    print(power_table(result))
    if result["teacher"]:
        print()
        print(teacher_table(result["teacher"]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
