"""The study's statistics a reviewer asks for, from its segments table alone: the event-level headline
(and the segment level), the crossed mixed model and the two-way cluster bootstrap (events and templates
as sources of variance), the per-pair event-level tests with Holm and BH, whether the study ran to its
planned size, and the ``statistics.json`` that traces every number. Never imports torch.

Because everything here reads only ``segments`` (one row per observed segment, as ``segments.csv``), a
stored study can be re-analysed from its CSVs without resampling (``petri restat RESULTS_DIR``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from petri.core.wording import counted
from petri.runs.export import write_csv
from petri.stats.groups import MIN_INFORMATIVE_N, GroupComparison, LevelComparisons, compare_levels
from petri.stats.mixed import BootstrapResult, MixedResult, cell_values, crossed_mixed_model, two_way_cluster_bootstrap
from petri.stats.multiple import pair_comparisons

__all__ = ["StudyStatistics", "study_statistics", "PEEKING_WARNING", "write_statistics", "STATISTICS_START",
           "STATISTICS_END", "replace_section"]

PEEKING_WARNING = (
    "Provisional: these numbers change with every batch. Stopping the study when the test looks significant "
    "inflates the false-positive rate well above the nominal 5% (each look is another chance of a fluke); "
    "fix the number of events before you start and read the test once, when every batch is in."
)
STATISTICS_START = "<!-- petri:statistics -->"
STATISTICS_END = "<!-- /petri:statistics -->"


def _num(v: Any) -> Any:
    """``v`` as plain JSON: numpy scalars unwrapped, NaN / inf as null, containers walked."""
    if isinstance(v, dict):
        return {k: _num(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_num(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if not math.isfinite(float(v)) else float(v)
    return v


@dataclass
class StudyStatistics:
    """Every test of one study (see the module docstring). ``pairs``: :data:`petri.stats.multiple.PAIR_COLUMNS`."""

    groups: tuple[str, str]
    comparison: LevelComparisons
    mixed: MixedResult | None
    bootstrap: BootstrapResult | None
    pairs: pd.DataFrame
    n_templates: int
    planned_batches: int
    done_batches: int
    seed: int
    n_bootstrap: int
    secondary: list[GroupComparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ran_to_plan(self) -> bool:
        return self.done_batches >= self.planned_batches

    def to_json(self) -> dict[str, Any]:
        """The ``statistics.json`` document: each test with its inputs (units and sizes), estimates,
        intervals, raw and adjusted p-values and method."""
        tests: list[dict[str, Any]] = []
        for role, c in (("headline", self.comparison.event), ("beside headline", self.comparison.segment),
                        *(("secondary (not corrected)", s) for s in self.secondary)):
            tests.append({"name": f"Mann-Whitney U, {c.unit} level, {c.group_a} vs {c.group_b}", "role": role,
                          **c.to_dict()})
        if self.mixed is not None:
            tests.append({"name": "crossed mixed model", "role": "templates and events as random effects",
                          **self.mixed.to_dict()})
        if self.bootstrap is not None:
            tests.append({"name": "two-way cluster bootstrap", "role": "assumption-light check of the mixed model",
                          **self.bootstrap.to_dict()})
        pairs = [{k: _num(v) for k, v in row.items()} for row in self.pairs.to_dict(orient="records")]
        return _num({
            "schema": 1,
            "groups": list(self.groups),
            "min_informative_n": MIN_INFORMATIVE_N,
            "design": {"planned_batches": self.planned_batches, "done_batches": self.done_batches,
                       "ran_to_planned_size": self.ran_to_plan, "templates": self.n_templates,
                       "seed": self.seed, "n_bootstrap": self.n_bootstrap},
            "tests": tests,
            "pairs": {"unit": "event (mean instability of the pair's segments over the event's samples and templates)",
                      "test": "Mann-Whitney U per pair", "corrections": ["Holm (family-wise error)",
                                                                          "Benjamini-Hochberg (false discovery rate)"],
                      "family_size": int(self.pairs["p_value"].notna().sum()) if len(self.pairs) else 0,
                      "rows": pairs},
            "notes": list(self.notes),
        })

    def markdown(self) -> list[str]:
        """The report's section (between :data:`STATISTICS_START` and :data:`STATISTICS_END`)."""
        a, b = self.groups
        lines = [STATISTICS_START, "## Templates and events as sources of variance", ""]
        if self.mixed is not None:
            m = self.mixed
            conf = f"{100 * m.confidence:g}%"
            lines += [
                f"Unit: one (event, template) cell = the mean segment instability of one batch; {m.n_cells} cells "
                f"({m.n_events_a} {a} and {m.n_events_b} {b} events × {counted(m.n_templates, 'template')}). Model: instability "
                f"~ group + (1 | event) + (1 | template), REML (statsmodels MixedLM).",
                "",
                "| quantity | estimate |", "|---|---|",
                f"| group effect {b} − {a} | {m.effect:+.4g} (SE {m.se:.3g}; {conf} CI {m.ci_low:+.4g}, {m.ci_high:+.4g}; "
                f"Wald p = {_p(m.p_value)}) |",
                f"| variance: event | {m.var_event:.4g} (ICC {m.icc_event:.3f}) |",
                f"| variance: template | {m.var_template:.4g} (ICC {m.icc_template:.3f}) |",
                f"| variance: residual (event × template, sampling) | {m.var_residual:.4g} |",
                f"| converged | {'yes' if m.converged else 'NO'} |",
            ]
            if m.warnings:
                lines += ["", "Fit messages: " + "; ".join(w.rstrip(".") for w in m.warnings) + "."]
        if self.bootstrap is not None:
            bs = self.bootstrap
            lines += ["", f"Two-way cluster bootstrap ({bs.n_bootstrap} resamples of events within group and of "
                          f"templates, seed {bs.seed}): {b} − {a} = {bs.estimate:+.4g} "
                          f"[{100 * bs.confidence:g}% CI {bs.ci_low:+.4g}, {bs.ci_high:+.4g}] (percentile)."]
        lines += [f"\n_{n}._" for n in self.notes]
        lines += ["", "## Per-pair comparisons (event level)", "",
                  f"One Mann-Whitney test per concept pair on the event values of that pair's segments "
                  f"({a} vs {b}); the family is the {int(self.pairs['p_value'].notna().sum()) if len(self.pairs) else 0} "
                  "tested pairs. Holm controls the family-wise error rate, Benjamini-Hochberg the false discovery "
                  "rate. A row with a group below "
                  f"{MIN_INFORMATIVE_N} events is marked uninformative. All rows: `pair_tests.csv`.", "",
                  "| pair | n | r [95% CI] | p raw | p Holm | p BH |", "|---|---|---|---|---|---|"]
        for row in self.pairs.itertuples(index=False):
            pair = str(row.pair).replace("|", "\\|")
            if not row.informative:
                lines.append(f"| {pair} | {row.n_a} / {row.n_b} | {row.note} | — | — | — |")
            else:
                lines.append(f"| {pair} | {row.n_a} / {row.n_b} | {row.rank_biserial:+.3f} [{row.ci_low:+.3f}, "
                             f"{row.ci_high:+.3f}] | {_p(row.p_value)} | {_p(row.p_holm)} | {_p(row.p_bh)} |")
        lines += ["", "## Planned size", "",
                  f"Planned {self.planned_batches} (event, template) batches; {self.done_batches} in the analysis: "
                  + ("**the study ran to its planned size**, so the tests were read once, at the end." if self.ran_to_plan
                     else "**the study did NOT run to its planned size**: these are provisional numbers, and stopping "
                          "on them inflates the false-positive rate."),
                  "", "Every test above and the headline, with its inputs (units, group sizes), estimates, intervals, "
                  "raw and adjusted p-values and method: `statistics.json`.",
                  STATISTICS_END]
        return lines


def _p(p: float) -> str:
    return "n/a" if p is None or not math.isfinite(p) else (f"{p:.3g}" if p >= 1e-3 else f"{p:.2e}")


def study_statistics(segments: pd.DataFrame, groups: tuple[str, str], *, planned_batches: int, seed: int = 0,
                     n_bootstrap: int = 2000, confidence: float = 0.95, comparison: LevelComparisons | None = None,
                     secondary: list[GroupComparison] | None = None) -> StudyStatistics:
    """All of :class:`StudyStatistics` from a segments table (``event_id``, ``template_id``, ``group``,
    ``pair``, ``instability``). ``comparison`` is recomputed with :func:`petri.stats.groups.compare_levels` unless
    given (the analysis passes its own, the same numbers)."""
    kw: dict[str, Any] = dict(n_bootstrap=n_bootstrap, confidence=confidence, seed=seed)
    if comparison is None:
        comparison = compare_levels(segments, group_col="group", groups=groups, event_col="event_id", **kw)
    cells = cell_values(segments)
    notes: list[str] = []
    mixed = boot = None
    try:
        mixed = crossed_mixed_model(cells, groups, confidence=confidence)
    except ValueError as err:
        notes.append(f"mixed model not fitted: {err}")
    except np.linalg.LinAlgError as err:
        notes.append(f"mixed model failed: {err}")
    try:
        boot = two_way_cluster_bootstrap(cells, groups, **kw)
    except ValueError as err:
        notes.append(f"two-way cluster bootstrap skipped: {err}")
    pairs = pair_comparisons(segments, groups, **kw)
    done = int(segments[["event_id", "template_id"]].drop_duplicates().shape[0])
    return StudyStatistics(cast(tuple[str, str], tuple(groups)), comparison, mixed, boot, pairs, int(segments["template_id"].nunique()),
                           int(planned_batches), done, int(seed), int(n_bootstrap), list(secondary or []), notes)


def replace_section(report: str, section: list[str], after: str = "\n## Groups") -> str:
    """``report`` with its statistics section replaced by ``section`` (or inserted before ``after``)."""
    text = "\n".join(section)
    if STATISTICS_START in report and STATISTICS_END in report:
        head, rest = report.split(STATISTICS_START, 1)
        return head + text + rest.split(STATISTICS_END, 1)[1]
    if after not in report:
        raise ValueError(f"report has no {after.strip()!r} heading to put the statistics before")
    head, tail = report.split(after, 1)
    return head + text + "\n" + after + tail


def write_statistics(stats: StudyStatistics, out_dir: str | Path) -> dict[str, Path]:
    """Write ``statistics.json`` and ``pair_tests.csv`` into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    js, pairs = out / "statistics.json", out / "pair_tests.csv"
    js.write_text(json.dumps(stats.to_json(), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    write_csv(stats.pairs, pairs)  # formula-leading concept pairs neutralised, as in every CSV
    return {"statistics": js, "pair_tests": pairs}


def load_results(results_dir: str | Path) -> tuple[pd.DataFrame, tuple[str, str], int, int]:
    """(segments, compared groups, planned batches, base seed) of a study's output folder (its
    ``segments.csv`` and ``run.json``). Raises ``ValueError`` naming the missing file."""
    folder = Path(results_dir)
    for name in ("segments.csv", "run.json"):
        if not (folder / name).is_file():
            raise ValueError(f"RESULTS_DIR {folder}: no {name} (is it the output folder of `petri study`?)")
    meta = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    study = meta["study"]
    groups = tuple(study.get("comparison", {}).get("groups", ()))  # none: a paired study with one group
    planned = len(study["events"]) * len(meta["templates"])
    return pd.read_csv(folder / "segments.csv"), groups, planned, int(meta.get("seed", 0))


def restat(results_dir: str | Path, n_bootstrap: int = 2000) -> StudyStatistics:
    """Re-analyse a stored study from its CSVs (no resampling): write ``statistics.json`` and
    ``pair_tests.csv`` and put the statistics section into its ``report.md``."""
    folder = Path(results_dir)
    segments, groups, planned, seed = load_results(folder)
    stats = study_statistics(segments, groups, planned_batches=planned, seed=seed, n_bootstrap=n_bootstrap)
    write_statistics(stats, folder)
    events = folder / "events.csv"
    if events.is_file():  # the flag of a per-event interval resting on too few samples (older runs lack it)
        ev = pd.read_csv(events)
        if "ci_informative" not in ev.columns and "n_samples" in ev.columns:
            ev.insert(list(ev.columns).index("ci_high") + 1, "ci_informative", ev["n_samples"] >= MIN_INFORMATIVE_N)
            write_csv(ev, events)
    report = folder / "report.md"
    if report.is_file():
        report.write_text(replace_section(report.read_text(encoding="utf-8"), stats.markdown()), encoding="utf-8")
    return stats
