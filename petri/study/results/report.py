"""Write a study's outputs: tidy CSVs + JSON sidecar, the figures, and ``report.md``.

Never imports torch: it reads a :class:`~petri.study.execution.runner.StudyResult` and its analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pandas as pd

from petri.core.wording import counted
from petri.measure.sample_metrics import sample_metrics
from petri.runs.export import TokenText, package_versions, with_final_token, write_csv, write_tables
from petri.stats.groups import GroupComparison, too_small_note
from petri.study.figures.paired_plots import paired_slope_figure
from petri.study.figures.plots import event_ranking_figure, instability_figure, jaccard_heatmap, save_figures
from petri.study.results.analysis import StudyAnalysis, analyze
from petri.study.results.paired_statistics import PairedStatistics, write_paired
from petri.study.results.statistics import write_statistics

if TYPE_CHECKING:
    from petri.study.execution.runner import StudyResult

#: The CSVs a study writes (the four tidy levels first, then pairs).
STUDY_TABLES = ("positions", "segments", "samples", "events", "pairs")
FIGURE_TITLES = {
    "instability": "(1) instability distributions",
    "events": "(2) mean instability per event, ranked",
    "jaccard": "(3) template Jaccard heatmap",
    "paired": "(4) paired: one line per event across the conditions",
}


@dataclass
class StudyOutputs:
    out_dir: Path
    report: Path
    tables: dict[str, Path]
    figures: dict[str, dict[str, Path]]
    analysis: StudyAnalysis
    notes: list[str] = field(default_factory=list)


def _fmt(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def _p(p: float) -> str:
    return "n/a" if not math.isfinite(p) else (f"{p:.3g}" if p >= 1e-3 else f"{p:.2e}")


def _comparison_row(c: GroupComparison) -> str:
    conf = f"{100 * c.confidence:g}%"
    return (
        f"| {c.unit_label} | {c.group_a} {c.n_a} / {c.group_b} {c.n_b} | {_fmt(c.median_a)} / {_fmt(c.median_b)} "
        + (f"| {c.u_statistic:g} | {_p(c.p_value)} ({c.p_method}) | {c.rank_biserial:+.3f} [{conf} CI {c.ci_low:+.3f}, "
           f"{c.ci_high:+.3f}] ({c.ci_method}) |" if c.informative
           else f"| — | — | uninformative: {too_small_note(c.n_a, c.n_b, c.unit)} |")
    )


def _md_table(df: pd.DataFrame, floats: int = 4) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append(_fmt(v, floats))
            else:
                cells.append(str(v).replace("|", "\\|").replace("\n", " "))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _metrics_section(samples: pd.DataFrame) -> list[str]:
    """The report's lines for the registered per-sample metrics with ``report`` set (none of the
    built-in ones: they have their sections above): each metric's description, then its mean per
    group and over all samples. No lines when there is no such metric."""
    shown = [m for m in sample_metrics() if m.report and m.dtype in (float, int, bool)]
    if not shown:
        return []
    lines = ["", "## Per-sample metrics", ""]
    lines += [f"- `{m.column}`: {m.description}" + (f" (higher is {m.higher_is})." if m.higher_is else ".") for m in shown]
    columns = [m.column for m in shown]
    means = samples.groupby("group", sort=False)[columns].mean()
    means.loc["all samples"] = samples[columns].mean()
    return lines + ["", "Means per group:", "", _md_table(means.astype(float).reset_index(names="group"))]


def _conditions_lines(study) -> list[str]:
    """A paired study's conditions (the first is the reference of every paired comparison)."""
    if not study.paired:
        return []
    lines = ["## Conditions (within each event: same templates, slot positions and seeds)", "",
             "| condition | dose | transform | description |", "|---|---|---|---|"]
    for i, cond in enumerate(study.conditions):
        dose = "" if cond.dose is None else f"{cond.dose:g}"
        ref = " (reference)" if i == 0 else ""
        lines.append(f"| {cond.id}{ref} | {dose} | {cond.transform or ''} | {cond.description} |")
    return lines + [""]


def _group_headline(c, groups: tuple[str, ...], headline: bool = True) -> list[str]:
    """The group test (event level; the headline unless the study is paired) with the segment level beside it."""
    a, b = groups
    return [
        "## Headline (event level: the independent unit)" if headline else
        "## Group test (reference condition, event level)",
        "",
        f"**{c.event.summary()}**",
        "",
        "Segments of one event share that event, so they are not independent; the segment-level test is shown beside "
        "the headline for comparison with the original study, not as evidence on its own.",
        "",
        "| level | n | median | U | p | rank-biserial r [CI] |",
        "|---|---|---|---|---|---|",
        _comparison_row(c.event),
        _comparison_row(c.segment),
        "",
        f"Effect size: rank-biserial r = Cliff's delta = P({b} > {a}) - P({b} < {a}); positive means {b} events are less stable.",
        "",
    ]


def paired_figure(result: StudyResult, analysis: StudyAnalysis):
    """The paired study's slope chart of the event instabilities, titled with the headline paired test."""
    study, paired = result.study, cast(PairedStatistics, analysis.paired)  # a paired study's analysis has them
    head = paired.headline
    return paired_slope_figure(analysis.events, [c.id for c in study.conditions], doses=paired.doses,
                               title=head.summary() if head is not None else "", model_id=result.model_id,
                               run_id=result.run_id)


def model_label(model_id: str) -> str:
    """The sentence that says which model the numbers belong to."""
    if "diffusiongemma" in model_id.lower():
        return f"All figures and numbers below are for **{model_id}**."
    return (
        f"All figures and numbers below are for the model **{model_id}** (e.g. the small embedded model "
        "petri ships), **not for DiffusionGemma**. They show what this model does; they say nothing about "
        "DiffusionGemma."
    )


def render_report(result: StudyResult, analysis: StudyAnalysis, figures: dict[str, dict[str, Path]], out_dir: Path,
                  command: str | None = None, notes: list[str] | None = None) -> str:
    study = result.study
    c = analysis.comparison
    pres = analysis.preservation
    conv = analysis.convergence
    ev = analysis.events
    lines = [
        f"# {study.title}",
        "",
        f"> {model_label(result.model_id)}",
        "",
        f"Study `{study.id}` ({study.language}) from `{study.source}`: concepts {', '.join(f'`{x}`' for x in study.concepts)}; "
        f"{counted(len(study.events), 'event')} ({', '.join(f'{g} {len(study.events_in(g))}' for g in study.groups)}), "
        f"{counted(len(result.template_ids), 'template')}, {counted(result.samples, 'shuffled sample')} per "
        f"{'(event, template, condition)' if study.paired else '(event, template)'}: "
        f"{counted(len(result.batches) * result.samples, 'sample')} in all.",
        "",
        *_conditions_lines(study),
        *(analysis.paired.markdown() if analysis.paired is not None else []),
        *(_group_headline(c, study.comparison, not study.paired) if c is not None else []),
        *(analysis.statistics.markdown() + [""] if analysis.statistics is not None else []),
        "## Groups",
        "",
        _md_table(analysis.group_summary.rename(columns={"median_instability": "median", "mean_instability": "mean"})),
        "",
        "Event value = mean segment instability over all the event's samples and templates (segment instability = mean "
        "flips per position strictly between two adjacent anchors).",
    ]
    if analysis.secondary:
        lines += ["", "Secondary event-level comparisons (extra groups; not corrected for multiple comparisons):", "",
                  "| level | n | median | U | p | rank-biserial r [CI] |", "|---|---|---|---|---|---|"]
        lines += [_comparison_row(s) for s in analysis.secondary]
    top = ev.sort_values("instability", ascending=False)
    unit = ["event_id", "condition"] if study.paired else ["event_id"]
    show = pd.concat([top.head(5), top.tail(5)]).drop_duplicates(unit)
    lines += [
        "",
        "## Events (most and least unstable)",
        "",
        _md_table(show[["rank", *unit, "group", "instability", "ci_low", "ci_high", "event"]]),
        "",
        "CI: 95% cluster bootstrap over the event's samples. All events: `events.csv`.",
        "",
        "## Anchor preservation",
        "",
        f"- Reading 1 (surface form intact in the final text): **{pres['anchors_intact']}/{pres['anchors_total']}** anchors "
        f"({100 * pres['intact_share']:.1f}%); samples with every anchor intact: {pres['samples_all_intact']}/{pres['samples_total']}.",
        "- Reading 2 (model agreement: share of steps whose unforced argmax equals the anchor tokens): "
        f"**{pres['mean_agreement']:.3f}** on average.",
        "",
        _md_table(analysis.preservation_by_concept),
        "",
        "## Template sensitivity",
        "",
        f"Mean off-diagonal Jaccard of the top-{analysis.top_n} nouns per template: **{_fmt(analysis.jaccard_mean, 3)}** "
        f"over {counted(len(result.template_ids), 'template')}. Tagger: {analysis.tagger}.",
        "",
        _md_table(analysis.jaccard.reset_index(names="template"), 3),
        "",
        "## Convergence",
        "",
        f"- Mean denoising steps: {conv['mean_steps']:.2f} of at most {conv['max_denoising_steps']}.",
        f"- Share of samples that stopped before the step limit: {100 * conv['stopped_early_share']:.1f}%.",
        f"- Mean settled share (free positions with no flip in the last 3 steps): {conv['mean_settled_share']:.3f}.",
        "",
        "| group | samples | mean steps | stopped early | settled share |",
        "|---|---|---|---|---|",
    ]
    for g, d in conv["by_group"].items():
        lines.append(f"| {g} | {d['samples']} | {d['mean_steps']:.2f} | {100 * d['stopped_early_share']:.1f}% "
                     f"| {d['mean_settled_share']:.3f} |")
    lines += _metrics_section(analysis.tables["samples"])
    lines += ["", "## Figures", ""]
    for name, paths in figures.items():
        links = ", ".join(f"[{fmt}]({p.relative_to(out_dir).as_posix()})" for fmt, p in paths.items())
        lines.append(f"- {name}: {links}")
    lines += [
        "",
        "## Files",
        "",
        "Tidy CSVs; rows are keyed by `event_id`, `template_id` and `sample` (the sample's index within its batch), "
        "tagged with `group` and `model_id`:",
        "",
        "- `positions.csv`: one row per sample × canvas position (flips, commit step, entropy, anchor).",
        "- `segments.csv`: one row per segment between two adjacent anchors (its instability).",
        "- `samples.csv`: one row per sample (steps, settled share, anchor layout, final text, preservation).",
        "- `events.csv`: one row per event (the test's values, CIs, convergence, preservation; event text).",
        "- `pairs.csv` (per batch × concept pair), `templates.csv` (template texts), `jaccard.csv` (the matrix).",
        "- `pair_tests.csv`: one row per concept pair (event-level test, raw / Holm / BH p-values, `informative`).",
        "- `statistics.json`: every test's inputs (units, group sizes), estimates, intervals, raw and adjusted "
        "p-values and methods.",
        "- `run.json`: model, weights fingerprint, settings, seeds (base and per batch), versions, timestamps, tagger, "
        "study file hash, the whole study and every statistic above.",
    ]
    t = result.timings
    lines += [
        "",
        "## Run",
        "",
        f"- Model: `{result.model_id}` (weights fingerprint `{result.model_fingerprint}`) on `{result.device}`.",
        f"- Sampler settings: `{result.settings.to_dict()}`.",
        f"- Samples per batch: {result.samples}; base seed: {result.seed} "
        "(each batch's seed is derived from it and the event and template ids).",
        f"- Run id: `{result.run_id}`; store: `{result.store_path}`; batches computed this run: {result.computed}, "
        f"resumed from the store: {result.resumed}.",
        f"- Timings: wall {t.get('wall_s', 0):.1f} s this run; sampling {t.get('sampling_s_all_batches', 0):.1f} s over all batches "
        f"(mean {t.get('mean_batch_s', 0):.3f} s per batch of {result.samples}).",
        f"- Started {result.started_at}, finished {result.finished_at}.",
        f"- Study file SHA-256: `{study.file_sha256 or 'n/a'}`.",
        f"- Versions: {', '.join(f'{k} {v}' for k, v in package_versions().items())}.",
    ]
    if command:
        lines += [f"- Command: `{command}`"]
    all_notes = list(analysis.notes) + list(notes or [])
    if all_notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in all_notes]
    return "\n".join(lines) + "\n"


def sidecar(result: StudyResult, analysis: StudyAnalysis, notes: list[str]) -> dict:
    return {
        **result.metadata(),
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
        "tagger": analysis.tagger,
        "study": result.study.to_dict(),
        "analysis": analysis.to_dict(),
        "batch_seeds": {b.key: b.seed for b in result.batches},
        "batch_timings": {b.key: b.trajectory.timings for b in result.batches},
        "notes": list(analysis.notes) + notes,
    }


def write_study(
    result: StudyResult,
    out_dir: str | Path,
    *,
    top_n: int = 20,
    images: bool = True,
    command: str | None = None,
    analysis: StudyAnalysis | None = None,
    token_text: TokenText | None = None,
) -> StudyOutputs:
    """Analyse ``result`` and write into ``out_dir``: ``positions.csv`` (final tokens decoded by
    ``token_text``: :func:`petri.runs.export.token_decoder`), ``segments.csv``,
    ``samples.csv``, ``events.csv`` (the four tidy levels), ``pairs.csv``, ``templates.csv``,
    ``jaccard.csv``, ``run.json`` (sidecar),
    ``figures/*.html`` (+ PNG/SVG where possible) and ``report.md``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    analysis = analysis or analyze(result, top_n=top_n)
    fig_dir = out / "figures"
    study = result.study
    shown = [g for g in (*study.comparison, *study.show)]
    segments, events = analysis.tables["segments"], analysis.events
    if study.paired:  # one box per condition (the paired lines: the paired figure)
        shown = [c.id for c in study.conditions]
        segments, events = segments.assign(group=segments["condition"]), events.assign(group=events["condition"])
    figs = {
        "instability": instability_figure(segments, events, None if study.paired else analysis.comparison, shown,
                                          model_id=result.model_id, run_id=result.run_id,
                                          waiting="conditions of a paired study, one point per (event, condition)"),
        "events": event_ranking_figure(analysis.events, list(study.groups), model_id=result.model_id, run_id=result.run_id),
        "jaccard": jaccard_heatmap(analysis.jaccard, analysis.jaccard_mean, tagger=analysis.tagger, top_n=analysis.top_n,
                                   run_id=result.run_id),
    }
    if analysis.paired is not None:
        figs["paired"] = paired_figure(result, analysis)
    paths, notes = save_figures(figs, fig_dir, images=("png", "svg") if images else ())
    figures = {FIGURE_TITLES[name]: p for name, p in paths.items()}
    tables = {name: analysis.tables[name] for name in STUDY_TABLES}
    if "positions" in tables:
        tables["positions"] = with_final_token(tables["positions"].copy(), token_text)
    written = write_tables(tables, out, sidecar(result, analysis, notes))
    templates = out / "templates.csv"
    write_csv(pd.DataFrame([(t.id, t.text) for t in study.templates if t.id in result.template_ids],
                           columns=["template_id", "template"]), templates)
    written["templates"] = templates
    jac = out / "jaccard.csv"
    write_csv(analysis.jaccard.rename_axis("template").reset_index(), jac)
    written["jaccard"] = jac
    if analysis.statistics is not None:
        written.update(write_statistics(analysis.statistics, out))
    if analysis.paired is not None:
        written.update(write_paired(analysis.paired, out))
    report = out / "report.md"
    report.write_text(render_report(result, analysis, figures, out, command=command, notes=notes), encoding="utf-8")
    return StudyOutputs(out, report, written, figures, analysis, notes)
