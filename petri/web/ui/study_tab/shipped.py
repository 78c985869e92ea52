"""The shipped study run (``assets/studies/results/inventory_order-en-petri-tiny``: the committed CSVs,
``run.json`` and ``report.md``), shown by the Study tab when it opens, so a visitor sees real
results before running anything. The figures are redrawn from the committed tables with the study
figures of :mod:`petri.study.figures.plots`; the statistics are the committed ones (``run.json``), labelled
with the model and run they came from. Nothing is sampled or recomputed.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from petri.core.paths import shipped_study_dir
from petri.stats.groups import GroupComparison, LevelComparisons
from petri.study.figures.plots import event_ranking_figure, instability_figure, jaccard_heatmap

#: The committed files offered for download (positions.csv is committed gzipped: the Hub's 10 MiB limit).
DOWNLOADS = ("events.csv", "segments.csv", "samples.csv", "pairs.csv", "positions.csv.gz", "jaccard.csv", "pair_tests.csv",
             "statistics.json", "run.json", "report.md")


def comparison_from_dict(data: dict) -> GroupComparison:
    """A :class:`GroupComparison` back from its ``to_dict()`` (the derived keys dropped)."""
    names = {f.name for f in fields(GroupComparison)}
    return GroupComparison(**{k: v for k, v in data.items() if k in names})


@dataclass
class ShippedStudy:
    """A committed study run: its sidecar (``run.json``), event and segment tables, report text."""

    folder: Path
    run: dict
    events: pd.DataFrame
    segments: pd.DataFrame
    report: str

    @property
    def analysis(self) -> dict:
        return self.run["analysis"]

    @property
    def comparison(self) -> LevelComparisons:
        c = self.analysis["comparison"]
        return LevelComparisons(comparison_from_dict(c["event"]), comparison_from_dict(c["segment"]))

    @property
    def groups(self) -> list[str]:
        study = self.run["study"]
        return [*study["comparison"]["groups"], *study["comparison"].get("show", [])]

    def label(self) -> str:
        """Which model and run the results came from."""
        r = self.run
        return (f"**Shipped results** (committed in `{self.folder.name}`, nothing sampled now): study "
                f"*{r['study_title']}* — model `{r['model_id']}` (fingerprint `{r['model_fingerprint']}`) on "
                f"`{r['device']}`, run `{r['run_id']}`, {r['batches']} batches (events × templates) × "
                f"{r['samples_per_batch']} samples, seed {r['seed']}, finished {r['finished_at']}. "
                "Run a study below to replace them with your own.")


def load_shipped(folder: Path | None = None) -> ShippedStudy | None:
    """The committed study run in ``folder`` (default :func:`shipped_study_dir`), or None where it
    is not there (``PETRI_SHIPPED_STUDY`` naming an empty folder)."""
    folder = folder or shipped_study_dir()
    try:
        run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        events = pd.read_csv(folder / "events.csv")
        segments = pd.read_csv(folder / "segments.csv")
        report = (folder / "report.md").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    return ShippedStudy(folder, run, events, segments, report)


def shipped_figures(shipped: ShippedStudy, compact: bool = False) -> tuple[go.Figure, go.Figure, go.Figure]:
    """The study's three figures drawn from the committed tables and statistics (``compact``: the
    instability, ranking and Jaccard figures laid out for a page down to 420 px, :mod:`petri.study.figures.plots`)."""
    model, run_id = shipped.run["model_id"], shipped.run["run_id"]
    sens = shipped.analysis["template_sensitivity"]
    jaccard = pd.DataFrame(sens["jaccard"]).T.astype(float)
    return (
        instability_figure(shipped.segments, shipped.events, shipped.comparison, shipped.groups, model_id=model,
                           run_id=run_id, compact=compact),
        event_ranking_figure(shipped.events, shipped.groups, model_id=model, run_id=run_id, compact=compact),
        jaccard_heatmap(jaccard, sens["mean_off_diagonal"], tagger=sens["tagger"], top_n=sens["top_n"], run_id=run_id,
                        compact=compact),
    )


def shipped_markdown(shipped: ShippedStudy) -> str:
    """The label, then the committed headline test and the segment-level one beside it."""
    c = shipped.comparison
    lines = [shipped.label(), "", f"**Headline (event level, independent units):** {c.event.summary()}", "",
             f"Segment level (segments of one event are not independent; shown beside it): {c.segment.summary()}"]
    for sec in shipped.analysis.get("secondary_comparisons", []):
        lines += ["", f"Secondary: {comparison_from_dict(sec).summary()}"]
    return "\n".join(lines)


def report_markdown(shipped: ShippedStudy) -> str:
    """``report.md`` for the page: its figure links (relative files) left out; the figures are above."""
    return "\n".join(line for line in shipped.report.splitlines() if "](figures/" not in line)


def shipped_files(shipped: ShippedStudy, workdir: Path) -> list[str]:
    """Copies of the committed files in the UI's temp folder (which Gradio serves)."""
    out = workdir / "shipped"
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name in DOWNLOADS:
        source = shipped.folder / name
        if source.is_file():
            files.append(str(shutil.copy(source, out / name)))
    return files
