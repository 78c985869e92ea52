"""Evaluating the probe on a labelled set (issue 50): per-item predictions with probabilities,
accuracy with a Wilson interval, calibration (reliability bins, ECE, Brier), repeatability (the
same requests read R times with different seeds: the share of changed answers) and the exact
McNemar comparison of two evaluations (two models, prompts or configurations) with the table of
discordant items.

The metrics are computed on repeat 0 (one prediction per item and question); questions an
``ask_if`` skipped, and items without a gold answer for a question, are listed but not scored.
The sets themselves: :mod:`petri.study.probe_set`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from petri.core.cancel import CancelToken
from petri.core.probe import ProbeRequest
from petri.engine.probe import ProbeResult, read_slots
from petri.stats.calibration import (brier_score, changed_share, expected_calibration_error, reliability_bins,
                                     wilson_interval)
from petri.stats.paired import mcnemar_exact
from petri.study.probe_set import LabelledItem, LabelledSet, load_labelled_set  # noqa: F401 - the contract's names

PREDICTION_COLUMNS = ["item_id", "question", "repeat", "gold", "answer", "correct", "skipped", "p_answer", "p_gold",
                      "mass", "entropy", "draws"]
SUMMARY_COLUMNS = ["question", "n", "correct", "accuracy", "wilson_low", "wilson_high", "ece", "brier",
                   "changed_share", "repeats", "majority_share", "mean_mass", "mean_entropy", "skipped"]


def item_request(labelled: LabelledSet, item: LabelledItem, *, samples, steps: int, seed: int) -> ProbeRequest:
    """The probe request of one item of ``labelled``."""
    return ProbeRequest(prompt=item.prompt, frame=item.frame or labelled.frame, questions=labelled.questions,
                        instructions=labelled.instructions, samples=samples, steps=steps, seed=seed)


def prediction_rows(labelled: LabelledSet, item: LabelledItem, result: ProbeResult, repeat: int) -> list[dict]:
    """One row per question of one read of ``item``: the PREDICTION_COLUMNS and ``p_<alternative>``
    for each alternative (NaN where the question was skipped)."""
    final = result.final()
    rows = []
    for q in labelled.questions:
        gold = item.gold.get(q.name, "")
        read = final.get(q.name)
        row = {"item_id": item.item_id, "question": q.name, "repeat": repeat, "gold": gold,
               "answer": read.answer if read else "", "skipped": read is None}
        if read is None:
            row.update(correct=np.nan, p_answer=np.nan, p_gold=np.nan, mass=np.nan, entropy=np.nan, draws=0)
            row.update({f"p_{alt}": np.nan for alt in q.alternatives})
        else:
            probs = dict(zip(q.alternatives, read.probs.tolist()))
            row.update(correct=(read.answer == gold) if gold else np.nan, p_answer=probs[read.answer],
                       p_gold=probs.get(gold, np.nan), mass=read.mass, entropy=read.entropy, draws=read.draws)
            row.update({f"p_{alt}": p for alt, p in probs.items()})
        rows.append(row)
    return rows


@dataclass(frozen=True)
class ProbeEvaluation:
    """``predictions``: one row per (item, question, repeat), PREDICTION_COLUMNS then one
    ``p_<alternative>`` column per alternative of every question; ``summary``: one row per
    question (SUMMARY_COLUMNS); ``reliability``: :func:`reliability_bins` of each question
    (``question`` first); ``meta``: model, set, settings and timing."""

    predictions: pd.DataFrame
    summary: pd.DataFrame
    reliability: pd.DataFrame
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        def records(frame: pd.DataFrame) -> list[dict]:
            return [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in row.items()}
                    for row in frame.astype(object).to_dict("records")]

        return {"meta": self.meta, "summary": records(self.summary), "reliability": records(self.reliability),
                "predictions": records(self.predictions)}


def summarise(labelled: LabelledSet, predictions: pd.DataFrame, bins: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, reliability) of ``predictions`` (see :class:`ProbeEvaluation`)."""
    rows, tables = [], []
    for q in labelled.questions:
        mine = predictions[predictions["question"] == q.name]
        first = mine[(mine["repeat"] == 0) & ~mine["skipped"].astype(bool) & (mine["gold"] != "")]
        n = len(first)
        correct = first["correct"].astype(bool).to_numpy()
        hits = int(correct.sum())
        low, high = wilson_interval(hits, n)
        probs = first[[f"p_{alt}" for alt in q.alternatives]].to_numpy(dtype=float)
        gold = np.array([q.alternatives.index(g) for g in first["gold"]], dtype=int)
        confidence = first["p_answer"].to_numpy(dtype=float)
        answers = mine[~mine["skipped"].astype(bool)].pivot_table(index="repeat", columns="item_id", values="answer",
                                                                  aggfunc="first")
        answers = answers.dropna(axis=1)
        counts = first["gold"].value_counts()
        rows.append({"question": q.name, "n": n, "correct": hits, "accuracy": hits / n if n else np.nan,
                     "wilson_low": low, "wilson_high": high,
                     "ece": expected_calibration_error(confidence, correct, bins) if n else np.nan,
                     "brier": brier_score(probs, gold) if n else np.nan,
                     "changed_share": changed_share(answers.to_numpy()) if answers.shape[1] else np.nan,
                     "repeats": int(mine["repeat"].max()) + 1 if len(mine) else 0,
                     "majority_share": float(counts.iloc[0] / n) if n else np.nan,
                     "mean_mass": float(first["mass"].mean()) if n else np.nan,
                     "mean_entropy": float(first["entropy"].mean()) if n else np.nan,
                     "skipped": int(mine[mine["repeat"] == 0]["skipped"].astype(bool).sum())})
        if n:
            tables.append(reliability_bins(confidence, correct, bins).assign(question=q.name))
    reliability = (pd.concat(tables, ignore_index=True) if tables else
                   pd.DataFrame(columns=["bin_low", "bin_high", "n", "mean_confidence", "accuracy", "question"]))
    reliability = reliability[["question", "bin_low", "bin_high", "n", "mean_confidence", "accuracy"]]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS), reliability


def prediction_columns(labelled: LabelledSet) -> list[str]:
    """Every column of the predictions table, in order."""
    extra = [f"p_{alt}" for q in labelled.questions for alt in q.alternatives]
    return PREDICTION_COLUMNS + list(dict.fromkeys(extra))


def evaluate(model, labelled: LabelledSet, *, samples=1, steps: int = 1, seed: int = 0, repeats: int = 1,
             on_item: Callable[[int, int], None] | None = None,
             on_rows: Callable[[list[dict]], None] | None = None,
             cancel: CancelToken | None = None) -> ProbeEvaluation:
    """Read every item of ``labelled`` ``repeats`` times (repeat r with seed ``seed + r``) on
    ``model``. ``on_item(done, total)`` after each read; ``on_rows(rows)`` gets each read's
    prediction rows as they come (the CLI appends them to its CSV, so a crash loses nothing read).
    Raises :class:`~petri.core.probe.ProbeInputError` (an item the model refuses) before reading."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    from petri.engine.probe import plan_probe

    for item in labelled.items:  # every refusal before any model work
        plan_probe(model, item_request(labelled, item, samples=samples, steps=steps, seed=seed))
    started = time.perf_counter()
    rows: list[dict] = []
    total, done = repeats * len(labelled.items), 0
    for repeat in range(repeats):
        for item in labelled.items:
            result = read_slots(model, item_request(labelled, item, samples=samples, steps=steps, seed=seed + repeat),
                                cancel=cancel)
            new = prediction_rows(labelled, item, result, repeat)
            rows += new
            done += 1
            if on_rows is not None:
                on_rows(new)
            if on_item is not None:
                on_item(done, total)
    predictions = pd.DataFrame(rows).reindex(columns=prediction_columns(labelled))
    summary, reliability = summarise(labelled, predictions)
    seconds = time.perf_counter() - started
    meta = {"set": labelled.name, "items": len(labelled.items), "questions": [q.name for q in labelled.questions],
            "model": dict(model.describe()), "samples": samples, "steps": steps, "seed": seed, "repeats": repeats,
            "seconds": seconds, "seconds_per_read": seconds / total}
    return ProbeEvaluation(predictions, summary, reliability, meta)


def compare_evaluations(a: ProbeEvaluation, b: ProbeEvaluation, labels: tuple[str, str] = ("a", "b")) -> dict:
    """Exact McNemar per question between two evaluations of one labelled set:
    :func:`compare_predictions` of their predictions tables."""
    return compare_predictions(a.predictions, b.predictions, labels)


def compare_predictions(a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str] = ("a", "b")) -> dict:
    """Exact McNemar per question on the items both prediction tables scored (repeat 0, matched on
    ``item_id``), and the discordant items: ``{"questions": [{question, n, a_correct, b_correct,
    mcnemar}], "discordant": [{item_id, question, gold, answer_a, answer_b, correct_a, correct_b}]}``.
    ``a`` and ``b``: :attr:`ProbeEvaluation.predictions` tables, or a stored evaluation's."""
    keep = ["item_id", "question", "gold", "answer", "correct"]

    def scored(p: pd.DataFrame) -> pd.DataFrame:
        p = p.assign(item_id=p["item_id"].astype(str), gold=p["gold"].fillna("").astype(str))
        return p[(p["repeat"] == 0) & ~p["skipped"].astype(bool) & (p["gold"] != "")][keep]

    merged = scored(a).merge(scored(b), on=["item_id", "question", "gold"], suffixes=("_a", "_b"))
    out: dict = {"labels": list(labels), "questions": [], "discordant": []}
    for question, pairs in merged.groupby("question", sort=False):
        x, y = pairs["correct_a"].astype(bool).to_numpy(), pairs["correct_b"].astype(bool).to_numpy()
        result = mcnemar_exact(x, y)
        out["questions"].append({"question": question, "n": int(len(pairs)), "a_correct": int(x.sum()),
                                 "b_correct": int(y.sum()), "mcnemar": result.to_dict(),
                                 "summary": result.summary(f"{question} correct", labels)})
        differ = pairs[x != y]
        out["discordant"] += [{k: (bool(v) if k.startswith("correct") else v) for k, v in row.items()}
                              for row in differ.to_dict("records")]
    return out
