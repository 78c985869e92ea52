"""The probe evaluation's files: ``predictions.csv`` (written row by row as reads come, so a crash
loses nothing read), ``summary.csv``, ``reliability.csv``, ``evaluation.json`` (everything, with the
comparison when there is one) and, with a comparison, ``discordant.csv``. CSVs are tidy and safe
(formula-leading text neutralised, :func:`petri.runs.export.write_csv`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from petri.runs.export import package_versions, write_csv, write_tables
from petri.study.probe.probe_eval import ProbeEvaluation


class PredictionWriter:
    """Appends prediction rows to ``path`` (CSV, header first), flushed after every call; ``columns``
    fixes their order (:func:`petri.study.probe.probe_eval.prediction_columns`)."""

    def __init__(self, path: str | Path, columns: list[str]):
        self.path, self.columns = Path(path), list(columns)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", encoding="utf-8", newline="")
        self._file.write(write_csv(pd.DataFrame(columns=self.columns)))
        self._file.flush()

    def __call__(self, rows: list[dict]) -> None:
        self._file.write(write_csv(pd.DataFrame(rows).reindex(columns=self.columns), header=False))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def write_evaluation(evaluation: ProbeEvaluation, out_dir: str | Path, comparison: dict | None = None,
                     predictions: bool = True) -> dict[str, Path]:
    """Write the evaluation's files into ``out_dir``; ``predictions=False`` leaves a
    ``predictions.csv`` already written row by row (:class:`PredictionWriter`) as it is, rewritten
    whole otherwise. Returns the paths by name."""
    tables = {"summary": evaluation.summary, "reliability": evaluation.reliability}
    if predictions:
        tables["predictions"] = evaluation.predictions
    if comparison is not None:
        tables["discordant"] = pd.DataFrame(comparison["discordant"],
                                            columns=["item_id", "question", "gold", "answer_a", "correct_a",
                                                     "answer_b", "correct_b"])
    meta = {**evaluation.to_dict(), "versions": package_versions()}
    if comparison is not None:
        meta["comparison"] = comparison
    written = write_tables(tables, out_dir, meta, sidecar="evaluation.json")
    written["evaluation"] = written.pop("run")
    if not predictions:
        written["predictions"] = Path(out_dir) / "predictions.csv"
    return written
