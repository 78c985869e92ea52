"""Evaluating the probe on a labelled set (issue 50): per-item predictions with probabilities,
accuracy with a Wilson interval, calibration (reliability bins, ECE, Brier), repeatability (the
same requests read R times with different seeds: the share of changed answers) and the exact
McNemar comparison of two evaluations (two models, prompts or configurations) with the table of
discordant items.

The metrics are computed on repeat 0 (one prediction per item and question); questions an
``ask_if`` skipped, and items without a gold answer for a question, are listed but not scored.
The sets themselves: :mod:`petri.study.probe.probe_set`.

Abstentions (issue 59): a read whose mass on its labels is below ``min_mass`` answers ``None``
(``answered`` False, ``correct`` False, ``p_answer`` NaN). The summary counts them apart:
``accuracy`` over the answered items, ``coverage`` (answered / scored) and
``accuracy_with_abstentions`` (abstentions counted wrong), each with a Wilson interval. ECE, the
reliability bins and the Brier score are over the answered items only; McNemar
(:func:`compare_predictions`) counts an abstention as not correct.

Position bias: per question, the share of answered items whose answer is the alternative the set
lists first (``answers_first``) against the share of those items whose gold answer is that
alternative (``gold_first``), both with Wilson intervals; ``position_bias`` is their difference.
``commonest_gold_share`` is the accuracy of always giving the commonest gold answer (the baseline
an answer that ignores the item reaches at best).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from petri.core.cancel import CancelToken
from petri.core.probe import DEFAULT_MIN_MASS, ORDER_CYCLIC, ProbeRequest
from petri.engine.probe import ProbeResult, read_slots
from petri.stats.calibration import brier_score, changed_share, expected_calibration_error, reliability_bins, wilson_interval
from petri.stats.paired import mcnemar_exact
from petri.study.probe.probe_set import LabelledItem, LabelledSet, load_labelled_set  # noqa: F401 - the contract's names

PREDICTION_COLUMNS = ["item_id", "question", "repeat", "gold", "answer", "answered", "correct", "skipped", "p_answer",
                      "p_gold", "mass", "order_spread", "orders", "entropy", "draws"]
SUMMARY_COLUMNS = ["question", "n", "answered", "coverage", "coverage_low", "coverage_high", "correct", "accuracy",
                   "wilson_low", "wilson_high", "accuracy_with_abstentions", "with_abstentions_low",
                   "with_abstentions_high", "answers_first", "answers_first_low", "answers_first_high", "gold_first",
                   "gold_first_low", "gold_first_high", "position_bias", "ece", "brier", "changed_share", "repeats",
                   "commonest_gold_share", "mean_mass", "mean_order_spread", "mean_entropy", "skipped"]
#: a labelled set is read in every cyclic order unless told otherwise (issue 59)
EVAL_ORDER = ORDER_CYCLIC


def item_request(labelled: LabelledSet, item: LabelledItem, *, samples, steps: int, seed: int,
                 order: str = EVAL_ORDER, min_mass: float = DEFAULT_MIN_MASS) -> ProbeRequest:
    """The probe request of one item of ``labelled``."""
    return ProbeRequest(prompt=item.prompt, frame=item.frame or labelled.frame, questions=labelled.questions,
                        instructions=labelled.instructions, samples=samples, steps=steps, seed=seed, order=order,
                        min_mass=min_mass)


def prediction_rows(labelled: LabelledSet, item: LabelledItem, result: ProbeResult, repeat: int) -> list[dict]:
    """One row per question of one read of ``item``: the PREDICTION_COLUMNS and ``p_<alternative>``
    for each alternative (NaN where the question was skipped; ``answer`` None where the read
    abstained, ``order_spread`` the largest range of an alternative's probability over the orders)."""
    final = result.final()
    rows = []
    for q in labelled.questions:
        gold = item.gold.get(q.name, "")
        read = final.get(q.name)
        row = {"item_id": item.item_id, "question": q.name, "repeat": repeat, "gold": gold,
               "answer": read.answer if read else "", "skipped": read is None}
        if read is None:
            row.update(answered=False, correct=np.nan, p_answer=np.nan, p_gold=np.nan, mass=np.nan,
                       order_spread=np.nan, orders=0, entropy=np.nan, draws=0)
            row.update({f"p_{alt}": np.nan for alt in q.alternatives})
        else:
            probs = dict(zip(q.alternatives, read.probs.tolist()))
            row.update(answered=read.answer is not None, correct=(read.answer == gold) if gold else np.nan,
                       p_answer=probs[read.answer] if read.answer is not None else np.nan,
                       p_gold=probs.get(gold, np.nan), mass=read.mass, order_spread=float(read.spread.max()),
                       orders=len(read.order_probs) if read.order_probs is not None else 1, entropy=read.entropy,
                       draws=read.draws)
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


def _share(hits, n: int) -> tuple[float, float, float]:
    """(share, Wilson low, Wilson high) of ``hits`` of ``n`` (NaN share with n = 0)."""
    low, high = wilson_interval(int(hits), n)
    return (int(hits) / n if n else np.nan), low, high


def summary_row(question, first: pd.DataFrame, mine: pd.DataFrame, bins: int) -> dict:
    """One question's SUMMARY_COLUMNS: ``first`` its scored rows of repeat 0, ``mine`` all its rows."""
    n = len(first)
    answered = first["answered"].astype(bool).to_numpy() if "answered" in first else np.ones(n, dtype=bool)
    correct = first["correct"].astype(bool).to_numpy() & answered
    said = first[answered]
    probs = said[[f"p_{alt}" for alt in question.alternatives]].to_numpy(dtype=float)
    gold = np.array([question.alternatives.index(g) for g in said["gold"]], dtype=int)
    confidence = said["p_answer"].to_numpy(dtype=float)
    given = mine[~mine["skipped"].astype(bool)].assign(answer=lambda f: f["answer"].fillna("(no answer)"))
    answers = given.pivot_table(index="repeat", columns="item_id", values="answer", aggfunc="first").dropna(axis=1)
    counts = first["gold"].value_counts()
    m = int(answered.sum())
    row = {"question": question.name, "n": n, "answered": m, "correct": int(correct.sum())}
    for name, hits, total in (("coverage", m, n), ("accuracy", correct.sum(), m),
                              ("accuracy_with_abstentions", correct.sum(), n),
                              ("answers_first", (said["answer"] == question.alternatives[0]).sum(), m),
                              ("gold_first", (said["gold"] == question.alternatives[0]).sum(), m)):
        low_name = {"accuracy": "wilson", "accuracy_with_abstentions": "with_abstentions"}.get(name, name)
        row[name], row[f"{low_name}_low"], row[f"{low_name}_high"] = _share(hits, total)
    row.update(position_bias=row["answers_first"] - row["gold_first"],
               ece=expected_calibration_error(confidence, correct[answered], bins) if m else np.nan,
               brier=brier_score(probs, gold) if m else np.nan,
               changed_share=changed_share(answers.to_numpy()) if answers.shape[1] else np.nan,
               repeats=int(mine["repeat"].max()) + 1 if len(mine) else 0,
               commonest_gold_share=float(counts.iloc[0] / n) if n else np.nan,
               mean_mass=float(first["mass"].mean()) if n else np.nan,
               mean_order_spread=float(first["order_spread"].mean()) if n and "order_spread" in first else np.nan,
               mean_entropy=float(first["entropy"].mean()) if n else np.nan,
               skipped=int(mine[mine["repeat"] == 0]["skipped"].astype(bool).sum()))
    return row


def summarise(labelled: LabelledSet, predictions: pd.DataFrame, bins: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, reliability) of ``predictions`` (see :class:`ProbeEvaluation` and the module
    docstring for the abstentions and the position bias)."""
    rows, tables = [], []
    for q in labelled.questions:
        mine = predictions[predictions["question"] == q.name]
        first = mine[(mine["repeat"] == 0) & ~mine["skipped"].astype(bool) & (mine["gold"] != "")]
        rows.append(summary_row(q, first, mine, bins))
        said = first[first["answered"].astype(bool)] if "answered" in first else first
        if len(said):
            tables.append(reliability_bins(said["p_answer"].to_numpy(dtype=float),
                                           said["correct"].astype(bool).to_numpy(), bins).assign(question=q.name))
    reliability = (pd.concat(tables, ignore_index=True) if tables else
                   pd.DataFrame(columns=["bin_low", "bin_high", "n", "mean_confidence", "accuracy", "question"]))
    reliability = reliability[["question", "bin_low", "bin_high", "n", "mean_confidence", "accuracy"]]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS), reliability


def prediction_columns(labelled: LabelledSet) -> list[str]:
    """Every column of the predictions table, in order."""
    extra = [f"p_{alt}" for q in labelled.questions for alt in q.alternatives]
    return PREDICTION_COLUMNS + list(dict.fromkeys(extra))


def evaluate(model, labelled: LabelledSet, *, samples=1, steps: int = 1, seed: int = 0, repeats: int = 1,
             order: str = EVAL_ORDER, min_mass: float = DEFAULT_MIN_MASS,
             on_item: Callable[[int, int], None] | None = None,
             on_rows: Callable[[list[dict]], None] | None = None,
             cancel: CancelToken | None = None) -> ProbeEvaluation:
    """Read every item of ``labelled`` ``repeats`` times (repeat r with seed ``seed + r``) on
    ``model``, each read in ``order`` and abstaining below ``min_mass``. ``on_item(done, total)`` after each read; ``on_rows(rows)`` gets
    each read's prediction rows as they come (the CLI appends them to its CSV, so a crash loses nothing read).
    Raises :class:`~petri.core.probe.ProbeInputError` (an item the model refuses) before reading."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    from petri.engine.probe import layout_probe

    for item in labelled.items:  # every refusal before any model work
        layout_probe(model, item_request(labelled, item, samples=samples, steps=steps, seed=seed, order=order,
                                         min_mass=min_mass))
    started = time.perf_counter()
    rows: list[dict] = []
    total, done = repeats * len(labelled.items), 0
    for repeat in range(repeats):
        for item in labelled.items:
            result = read_slots(model, item_request(labelled, item, samples=samples, steps=steps, seed=seed + repeat,
                                                    order=order, min_mass=min_mass), cancel=cancel)
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
            "order": order, "min_mass": min_mass,
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
