"""The study's numbers from its batches: tidy tables with group labels, the event-level headline
test with the segment-level one beside it, per-event instability with bootstrap CIs, anchor
preservation (both readings), template sensitivity and convergence. Never imports torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from petri.core.dish import THOUGHT_CHANNEL
from petri.measure.nouns import FALLBACK, jaccard_matrix, mean_off_diagonal, tagger_name, top_nouns_by_template
from petri.measure.sample_metrics import event_metric_columns
from petri.measure.summary import EventSummary
from petri.measure.tables import anchors_table, preservation_summary
from petri.runs.export import TABLES, EventCondition, with_condition
from petri.stats.groups import MIN_INFORMATIVE_N, GroupComparison, LevelComparisons, compare_groups, compare_levels, event_level_values
from petri.study.results.paired_statistics import PairedStatistics, paired_statistics
from petri.study.results.statistics import StudyStatistics, study_statistics

if TYPE_CHECKING:  # the runner imports torch; analysis only reads its result
    from petri.study.execution.runner import StudyBatch, StudyResult

_SPECIAL_TOKEN = re.compile(r"<\|?[A-Za-z_][\w]*\|?>")
KEY_COLUMNS = ("study_id", "event_id", "group", "template_id")


def clean_text(text: str) -> str:
    """A generated canvas without the pinned thought block and special tokens (``<pad>``,
    ``<eos>``, ``<|...|>``), so they are never counted as words."""
    return _SPECIAL_TOKEN.sub(" ", text.replace(THOUGHT_CHANNEL, " "))


# --------------------------------------------------------------------------- tables


def batch_tables(batch: StudyBatch, study_id: str, names: Sequence[str] = tuple(TABLES)) -> dict[str, pd.DataFrame]:
    """The tidy tables ``names`` (of positions, segments, samples, pairs) of one batch, each row
    tagged with study_id, event_id, group and template_id (and, in a paired study, ``condition`` and
    ``dose`` where the conditions have doses) in front of the per-trajectory columns (the batch
    summarised once for all of them)."""
    out = {}
    summary = EventSummary(batch.trajectory)
    for name in names:
        df = TABLES[name](summary).drop(columns=["event", "template"], errors="ignore")
        for i, (col, value) in enumerate(zip(KEY_COLUMNS, (study_id, batch.event_id, batch.group, batch.template_id))):
            df.insert(i, col, value)
        if batch.condition:  # a paired study: which condition (and dose) the row was sampled under
            with_condition(df, EventCondition(batch.condition, batch.dose))
        out[name] = df
    return out


def study_tables(batches: list[StudyBatch], study_id: str, *, names: Sequence[str] = tuple(TABLES),
                 tables_of: Callable[[StudyBatch], dict[str, pd.DataFrame]] | None = None) -> dict[str, pd.DataFrame]:
    """The tidy tables ``names`` (default: positions, segments, samples, pairs) of every batch
    (:func:`batch_tables`, or ``tables_of``: e.g. a cache of them), in ``batches`` order. The event
    and template *texts* are left out of these tables (they would repeat on every row): join on
    ``event_id`` with the events table and on ``template_id`` with the study's templates."""
    per_batch = [tables_of(b) if tables_of is not None else batch_tables(b, study_id, names) for b in batches]
    return {name: pd.concat([t[name] for t in per_batch], ignore_index=True) for name in names}


def cluster_bootstrap_mean(sums: np.ndarray, counts: np.ndarray, n_boot: int, confidence: float,
                           rng: np.random.Generator) -> tuple[float, float]:
    """Percentile CI of ``sum(sums) / sum(counts)`` resampling clusters (samples) with replacement."""
    keep = counts > 0
    sums, counts = sums[keep], counts[keep]
    if sums.size < 2:
        return float("nan"), float("nan")
    idx = rng.integers(0, sums.size, size=(n_boot, sums.size))
    stats = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return float(low), float(high)


def events_table(tables: dict[str, pd.DataFrame], study, max_steps: int, *, n_boot: int = 2000, confidence: float = 0.95,
                 seed: int = 0) -> pd.DataFrame:
    """One row per event: mean segment instability (the event-level value of the test) with a
    cluster-bootstrap CI over the event's samples (``ci_informative`` False when it rests on fewer than
    :data:`petri.stats.groups.MIN_INFORMATIVE_N` samples), plus each registered per-sample metric's
    aggregates of the event's samples (:func:`petri.measure.sample_metrics.event_metric_columns`:
    flips, convergence and preservation built in). A paired study has one row per (event, condition),
    with ``condition`` (and ``dose``) after ``group`` and the condition's text as ``event``."""
    seg, smp = tables["segments"], tables["samples"]
    paired = bool(getattr(study, "paired", False))
    unit_col = "_unit" if paired else "event_id"
    if paired:
        seg = seg.assign(_unit=seg["event_id"] + "::" + seg["condition"])
        smp = smp.assign(_unit=smp["event_id"] + "::" + smp["condition"])
    values = event_level_values(seg, event_col=unit_col).set_index(unit_col)
    units = ([(e, c) for e in study.events for c in study.conditions] if paired
             else [(e, None) for e in study.events])
    rows = []
    for index, (event, cond) in enumerate(units):
        unit = f"{event.id}::{cond.id}" if cond is not None else event.id
        text = study.condition_text(event, cond.id) if cond is not None else event.text
        es = seg[seg[unit_col] == unit]
        per_sample = es.assign(_v=es["instability"]).groupby(["template_id", "sample"])["_v"].agg(["sum", "count"])
        low, high = cluster_bootstrap_mean(
            per_sample["sum"].to_numpy(float), per_sample["count"].to_numpy(float), n_boot, confidence,
            np.random.default_rng([seed, index]),
        )
        ss = smp[smp[unit_col] == unit]
        rows.append(
            {
                "study_id": study.id,
                "event_id": event.id,
                "group": event.group,
                **({"condition": cond.id} if cond is not None else {}),
                **({"dose": cond.dose} if cond is not None and cond.dose is not None else {}),
                "event": text,
                "n_templates": int(ss["template_id"].nunique()),
                "n_samples": int(len(ss)),
                "n_segments": int(es["instability"].notna().sum()),
                "instability": float(values.loc[unit, "instability"]) if unit in values.index else math.nan,
                "ci_low": low,
                "ci_high": high,
                "ci_informative": bool(len(per_sample) >= MIN_INFORMATIVE_N),
                **{name: how(ss[column], max_steps) for name, column, how in event_metric_columns()},
                "n_chars": len(text),
                "has_digits": any(ch.isdigit() for ch in text),
            }
        )
    df = pd.DataFrame(rows)
    df["rank"] = df["instability"].rank(ascending=False, method="min").astype("Int64")
    return df


# --------------------------------------------------------------------------- analysis


@dataclass
class StudyAnalysis:
    """Everything the report, figures and sidecar need."""

    tables: dict[str, pd.DataFrame]
    comparison: LevelComparisons | None  # None: a paired study with one group (no group test)
    secondary: list[GroupComparison]
    group_summary: pd.DataFrame
    preservation: dict[str, Any]
    preservation_by_concept: pd.DataFrame
    jaccard: pd.DataFrame
    jaccard_mean: float
    top_nouns: dict[str, list[str]]
    tagger: str
    top_n: int
    convergence: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    statistics: StudyStatistics | None = None
    paired: PairedStatistics | None = None  # a paired study's within-event statistics (its headline)

    @property
    def events(self) -> pd.DataFrame:
        return self.tables["events"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (no per-row tables)."""
        return {
            "comparison": self.comparison.to_dict() if self.comparison is not None else None,
            "secondary_comparisons": [c.to_dict() for c in self.secondary],
            "groups": self.group_summary.to_dict(orient="records"),
            "preservation": self.preservation,
            "preservation_by_concept": self.preservation_by_concept.to_dict(orient="records"),
            "template_sensitivity": {
                "tagger": self.tagger,
                "top_n": self.top_n,
                "jaccard": {r: {c: _num(v) for c, v in row.items()} for r, row in self.jaccard.to_dict(orient="index").items()},
                "mean_off_diagonal": _num(self.jaccard_mean),
                "top_nouns": self.top_nouns,
            },
            "convergence": self.convergence,
            "notes": self.notes,
            **({"paired": self.paired.to_dict()} if self.paired is not None else {}),
        }


def _num(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _preservation(batches: list[StudyBatch]) -> tuple[dict[str, Any], pd.DataFrame]:
    """Anchor preservation (both readings) over the whole study, per group and per concept: every
    figure aggregates :func:`petri.measure.tables.anchors_table` rows with :func:`petri.measure.tables.preservation_summary`."""
    df = pd.concat(
        [anchors_table(b.trajectory).assign(group=b.group, batch=i) for i, b in enumerate(batches)], ignore_index=True
    )
    per_sample = df.groupby(["batch", "sample"])["intact"].all()
    summary = {
        **preservation_summary(df),
        "samples_all_intact": int(per_sample.sum()),
        "samples_total": int(per_sample.size),
        "by_group": {g: preservation_summary(d) for g, d in df.groupby("group", sort=False)},
        "reading_1": "anchor's surface form is a whole word of the decoded final text",
        "reading_2": "share of steps in which the unforced argmax at the anchor's positions equals the anchor tokens",
    }
    by_concept = (
        df.groupby("concept", sort=False)
        .agg(anchors_intact=("intact", "sum"), anchors_total=("intact", "size"), mean_agreement=("agreement", "mean"))
        .reset_index()
    )
    return summary, by_concept


def _convergence(samples: pd.DataFrame, max_steps: int) -> dict[str, Any]:
    def block(d: pd.DataFrame) -> dict[str, float]:
        return {
            "samples": int(len(d)),
            "mean_steps": float(d["steps"].mean()),
            "stopped_early_share": float((d["steps"] < max_steps).mean()),
            "mean_settled_share": float(d["settled_share"].mean()),
        }

    return {"max_denoising_steps": max_steps, **block(samples), "by_group": {g: block(d) for g, d in samples.groupby("group", sort=False)}}


def group_summary_table(events: pd.DataFrame, segments: pd.DataFrame, groups: Sequence[str]) -> pd.DataFrame:
    """One row per group with events (in ``groups`` order): events, segments with a value, median
    and mean event instability, mean event length, share of events with digits. ``events`` is an
    :func:`events_table`, ``segments`` the segments table of the same batches."""
    summary = (
        events.groupby("group", sort=False)
        .agg(
            events=("event_id", "size"),
            median_instability=("instability", "median"),
            mean_instability=("instability", "mean"),
            mean_chars=("n_chars", "mean"),
            share_with_digits=("has_digits", "mean"),
        )
        .reindex([g for g in groups if g in set(events.group)])
        .reset_index()
    )
    per_group = segments.groupby("group")["instability"].agg(lambda v: int(v.notna().sum()))
    summary.insert(2, "segments", summary["group"].map(per_group).astype(int))
    return summary


def analyze(result: StudyResult, *, top_n: int = 20, n_bootstrap: int = 2000, confidence: float = 0.95) -> StudyAnalysis:
    """All of the study's statistics from a :class:`~petri.study.execution.runner.StudyResult`."""
    study = result.study
    max_steps = result.settings.max_denoising_steps
    tables = study_tables(result.batches, study.id)
    tables["events"] = events_table(tables, study, max_steps, n_boot=n_bootstrap, confidence=confidence, seed=result.seed)
    seg = tables["segments"]
    notes: list[str] = []
    ev = tables["events"]
    if study.paired:  # the group tests read the reference condition only
        reference = study.conditions[0].id
        seg, ev = seg[seg["condition"] == reference], ev[ev["condition"] == reference]
        if study.comparison:
            notes.append(f"paired study: the group tests compare the events under the reference condition "
                         f"{reference!r} only")

    stats_kwargs: dict[str, Any] = dict(n_bootstrap=n_bootstrap, confidence=confidence, seed=result.seed)
    if not study.comparison:
        return _finish(result, tables, None, [], ev, seg, notes, top_n, None)
    a, b = study.comparison
    comparison = compare_levels(seg, group_col="group", groups=(a, b), event_col="event_id", **stats_kwargs)
    secondary = []
    for g in study.show:
        for x, y in ((a, g), (g, b)):
            try:
                secondary.append(
                    compare_groups(ev.loc[ev.group == x, "instability"], ev.loc[ev.group == y, "instability"], unit="event",
                                   labels=(x, y), **stats_kwargs)
                )
            except ValueError as err:
                notes.append(f"secondary comparison {x} vs {y} skipped: {err}")

    statistics = study_statistics(seg, (a, b), planned_batches=len(study.events) * len(result.template_ids),
                                  comparison=comparison, secondary=secondary, **stats_kwargs)
    return _finish(result, tables, comparison, secondary, ev, seg, notes, top_n, statistics)


def _finish(result: StudyResult, tables: dict[str, pd.DataFrame], comparison: LevelComparisons | None,
            secondary: list[GroupComparison], ev: pd.DataFrame, seg: pd.DataFrame, notes: list[str], top_n: int,
            statistics: StudyStatistics | None) -> StudyAnalysis:
    """The rest of :func:`analyze` (groups, preservation, template sensitivity, convergence, and a
    paired study's within-event statistics)."""
    study = result.study
    max_steps = result.settings.max_denoising_steps
    group_summary = group_summary_table(ev, seg, study.groups)

    preservation, by_concept = _preservation(result.batches)

    texts: dict[str, list[str]] = {tid: [] for tid in result.template_ids}
    for batch in result.batches:
        texts[batch.template_id].extend(clean_text(t) for t in batch.trajectory.final_texts)
    method = study.noun_method()  # the study language's analyser (petri.measure.nouns)
    top = top_nouns_by_template(texts, n=top_n, method=method)
    jaccard = jaccard_matrix(top)  # = template_jaccard(texts, top_n), nouns extracted once
    jmean = mean_off_diagonal(jaccard) if len(texts) >= 2 else float("nan")
    if len(texts) < 2:
        notes.append("template sensitivity needs at least 2 templates; only one was run")
    tagger = tagger_name(method)
    if method == FALLBACK:
        notes.append(
            f"template sensitivity uses the word-level fallback, not a noun analyser ({tagger}), "
            f"so on {study.language} text the template Jaccard counts content words, not nouns"
        )

    return StudyAnalysis(
        tables=tables,
        comparison=comparison,
        secondary=secondary,
        group_summary=group_summary,
        preservation=preservation,
        preservation_by_concept=by_concept,
        jaccard=jaccard,
        jaccard_mean=jmean,
        top_nouns=top,
        tagger=tagger,
        top_n=top_n,
        convergence=_convergence(tables["samples"], max_steps),
        notes=notes,
        statistics=statistics,
        paired=(paired_statistics(tables["segments"], tables["samples"], [c.id for c in study.conditions],
                                  doses={c.id: cast(float, c.dose) for c in study.conditions} if study.dose_study else None,  # all set
                                  seed=result.seed) if study.paired else None),
    )
