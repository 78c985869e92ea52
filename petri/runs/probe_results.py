"""A probe run's stored documents and the tables read from them.

A probe run stores JSON documents, not trajectories (:meth:`petri.runs.store.RunStore.save_result`):

- kind ``probe`` (one slot read): ``read``, made by :func:`read_document` from a
  :class:`~petri.engine.probe.ProbeResult`;
- kind ``probe-eval`` (a labelled set's evaluation): while it runs, ``read/<n>`` (the prediction
  rows of the n-th read, committed as they come); once done, ``predictions``, ``summary`` and
  ``reliability`` (each :func:`frame_document` of the
  :class:`~petri.study.probe.probe_eval.ProbeEvaluation`'s table) and ``evaluation`` (its ``meta``), the
  ``read/<n>`` pieces dropped. A run stopped part way (cancelled, interrupted) keeps its pieces, and
  its ``predictions`` table reads them.

:data:`PROBE_TABLES` (registered in :mod:`petri.runs.formats`, so they download as any run table
does) read them back: ``reads`` (one row per question × step × alternative), ``top_k`` (one row per
question × step × rank), ``predictions``, ``summary``, ``reliability``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pandas as pd

from petri.engine.probe import ProbeResult

#: the run kinds of a single read and of an evaluation
PROBE_KIND, EVAL_KIND = "probe", "probe-eval"
#: the tables of an evaluation, stored one document each
EVAL_TABLES = ("predictions", "summary", "reliability")
#: the name prefix of the documents holding an evaluation's prediction rows read by read
PARTIAL_PREFIX = "read/"


def plain(value):
    """``value`` (numbers, numpy scalars and arrays, tuples, dicts) as JSON data; a NaN or an
    infinity becomes None (JSON has neither)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value


def read_document(result: ProbeResult) -> dict:
    """A slot read as the JSON document a ``probe`` run stores (and ``POST /api/probe`` answers):
    :meth:`~petri.engine.probe.ProbeResult.to_dict` (the request, each question's answer, every
    (question, step) read with one probability per alternative, the skipped questions, the prompt
    the model read, the seconds taken) as plain JSON data."""
    return plain(result.to_dict())


def frame_document(frame: pd.DataFrame) -> dict:
    """A table as a JSON document (``columns`` and ``rows``, NaN as null) that :func:`document_frame` reads back."""
    return json.loads(frame.to_json(orient="split", index=False))


def document_frame(document: dict) -> pd.DataFrame:
    """The table a :func:`frame_document` holds (its columns in order)."""
    return pd.DataFrame(document.get("data", []), columns=document.get("columns", []))


def slot_of(read: dict, request: dict) -> str:
    """The frame slot a stored read's question reads (its own name where the request does not say)."""
    for question in request.get("questions", []):
        if question.get("name") == read["question"]:
            return question.get("slot") or read["question"]
    return read["question"]


READ_COLUMNS = ["question", "slot", "position", "step", "alternative", "label", "probability", "spread", "orders",
                "mass", "min_mass", "answered", "entropy", "draws", "answer", "chosen"]


def reads_table(results: dict[str, dict]) -> Iterator[pd.DataFrame]:
    """A probe run's ``reads`` table (:data:`READ_COLUMNS`): one row per question × step ×
    alternative; ``label`` the token read for the alternative (as listed; an order-averaged read
    moves it), ``probability`` the alternative's mean over the ``orders`` read and ``spread`` its
    range over them, ``mass`` the raw probability on all its question's labels (the mean over the
    orders), ``answer`` null ("no answer", ``answered`` false) where ``mass`` is below
    ``min_mass``."""
    document = results.get("read", {})
    rows = [{"question": r["question"], "slot": slot_of(r, document.get("request", {})), "position": r.get("position"),
             "step": r["step"], "alternative": alternative, "label": label, "probability": p, "spread": spread,
             "orders": r.get("orders", 1), "mass": r["mass"], "min_mass": r.get("min_mass", 0.0),
             "answered": r["answer"] is not None, "entropy": r["entropy"], "draws": r["draws"], "answer": r["answer"],
             "chosen": alternative == r["answer"]}
            for r in document.get("reads", [])
            for alternative, label, p, spread in zip(r["alternatives"], r.get("labels") or [""] * len(r["probs"]),
                                                     r["probs"], r.get("spread") or [0.0] * len(r["probs"]))]
    yield pd.DataFrame(rows, columns=READ_COLUMNS)


def top_k_table(results: dict[str, dict]) -> Iterator[pd.DataFrame]:
    """A probe run's ``top_k`` table: ``question, step, rank, token, probability`` (the slot's
    whole-vocabulary top-k at each step, rank 1 the likeliest)."""
    rows = [{"question": r["question"], "step": r["step"], "rank": rank, "token": token, "probability": p}
            for r in results.get("read", {}).get("reads", []) for rank, (token, p) in enumerate(r["top_k"], 1)]
    yield pd.DataFrame(rows, columns=["question", "step", "rank", "token", "probability"])


def stored_table(name: str):
    """The chunks of an evaluation's table ``name``, read from its stored document."""
    def chunks(results: dict[str, dict]) -> Iterator[pd.DataFrame]:
        yield document_frame(results.get(name, {}))

    chunks.__doc__ = f"An evaluation's ``{name}`` table, as stored."
    return chunks


def predictions_table(results: dict[str, dict]) -> Iterator[pd.DataFrame]:
    """An evaluation's ``predictions``: as stored once it finished, else the rows of every read it
    committed before it stopped (in reading order)."""
    if "predictions" in results:
        yield document_frame(results["predictions"])
        return
    rows = [row for name, doc in results.items() if name.startswith(PARTIAL_PREFIX) for row in doc["rows"]]
    yield pd.DataFrame(rows)


#: (name, chunks over the stored documents, the run kind that has the table)
PROBE_TABLES = (("reads", reads_table, PROBE_KIND), ("top_k", top_k_table, PROBE_KIND),
                ("predictions", predictions_table, EVAL_KIND),
                *((name, stored_table(name), EVAL_KIND) for name in EVAL_TABLES if name != "predictions"))
