"""Tidy CSV export with a JSON sidecar that records everything a methods section needs.

Every CSV the project writes goes through :func:`write_csv`, which neutralises spreadsheet
formulas (CSV injection, as OWASP recommends): a text cell or column name that begins with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return is written with a leading ``'``, so a spreadsheet
shows it as text instead of running it. :func:`write_tables` records the raw values of every
neutralised cell in the JSON sidecar under ``csv_neutralised`` (table → column → raw values).
"""

from __future__ import annotations

import csv
import json
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from petri.core.trajectory import Trajectory
from petri.measure.summary import EventSummary, summary_of
from petri.measure.tables import pairs_table, positions_table, samples_table, segments_table

TABLES = {
    "positions": positions_table,
    "segments": segments_table,
    "samples": samples_table,
    "pairs": pairs_table,
}

#: What a spreadsheet reads as the start of a formula (OWASP, CSV injection).
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_PATTERN = r"^[=+\-@\t\r]"

#: Token ids (a 1-D int array) → their decoded texts, one per id.
TokenText = Callable[[np.ndarray], list[str]]

#: The columns that say which event (and template) a row belongs to, in a run's tables (``event_index``,
#: ``group``, ``event``, ``template``) and in a study folder's (``study_id``, ``event_id``, ``group``,
#: ``template_id``): a paired study's ``condition`` (and ``dose``) follows the last of them.
ROW_KEYS = ("study_id", "event_id", "event_index", "group", "event", "template_id", "template")


@dataclass(frozen=True)
class EventCondition:
    """The within-event condition one event (batch) of a paired study was sampled under, and its dose
    (``None``: the study gives no doses)."""

    condition: str
    dose: float | None = None


#: one :class:`EventCondition` per event of a paired study's run; ``None`` for any other run
Conditions = Sequence[EventCondition] | None


def with_condition(frame: pd.DataFrame, condition: EventCondition) -> pd.DataFrame:
    """``frame`` with ``condition`` (and ``dose``, when the condition has one) inserted right after the
    last :data:`ROW_KEYS` column it has (first where it has none), in place; returned. One placement
    for a study folder's tables and a run's exports."""
    at = max((frame.columns.get_loc(c) + 1 for c in ROW_KEYS if c in frame.columns), default=0)
    frame.insert(at, "condition", condition.condition)
    if condition.dose is not None:
        frame.insert(at + 1, "dose", condition.dose)
    return frame

_VERSIONED = ("torch", "transformers", "numpy", "scipy", "pandas", "plotly", "textblob")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def token_decoder(tokenizer, model_id: str, trajectories: Sequence[Trajectory]) -> TokenText | None:
    """Decodes token ids one by one with ``tokenizer`` (a Hugging Face tokenizer), if every
    trajectory was sampled by model ``model_id`` (a stored run of another model: None)."""
    if tokenizer is None or any(t.model_id != model_id for t in trajectories):
        return None

    def decode(ids: np.ndarray) -> list[str]:
        unique, inverse = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
        texts = np.array([tokenizer.decode([int(i)]) for i in unique], dtype=object)
        return texts[inverse.reshape(-1)].tolist()

    return decode


def with_final_token(frame: pd.DataFrame, token_text: TokenText | None) -> pd.DataFrame:
    """A positions table with ``final_token`` (the final token's text; ``""`` without a decoder,
    e.g. a stored run of another model) right after ``final_token_id`` (in place; returned)."""
    ids = frame["final_token_id"].to_numpy()
    texts = token_text(ids) if token_text is not None and len(ids) else [""] * len(ids)
    frame.insert(frame.columns.get_loc("final_token_id") + 1, "final_token", texts)
    return frame


def run_table(
    trajectories: Sequence[Trajectory | EventSummary], name: str, groups: Sequence[str | None] | None = None,
    token_text: TokenText | None = None, conditions: Conditions = None,
) -> pd.DataFrame:
    """One tidy table (``name`` in :data:`TABLES`) over all trajectories or their summaries (one per event), rows tagged
    with event and model; with ``groups`` (one label per trajectory), also ``event_index`` and
    ``group`` beside ``event``; with ``conditions`` (a paired study's run), ``condition`` and ``dose``
    (:func:`with_condition`). Positions gain ``final_token`` (:func:`with_final_token`)."""
    frames = [event_table(event, name, index, groups, token_text, conditions) for index, event in enumerate(trajectories)]
    return pd.concat(frames, ignore_index=True)


def event_table(event: Trajectory | EventSummary, name: str, index: int, groups: Sequence[str | None] | None,
                 token_text: TokenText | None = None, conditions: Conditions = None) -> pd.DataFrame:
    """Table ``name`` of one event (its trajectory or summary: a chunk of :func:`run_table`), tagged with ``event_index`` and ``group``
    when ``groups`` is given (after ``event``, or first where the table carries no event text), and with the event's
    condition (and dose) when ``conditions`` is given (:func:`with_condition`)."""
    frame = TABLES[name](event)
    if name == "positions":
        with_final_token(frame, token_text)
    if groups is not None:
        at = 1 if "event" in frame.columns else 0
        frame.insert(at, "group", groups[index] if groups[index] is not None else "")
        frame.insert(at, "event_index", index)
    if conditions is not None:
        with_condition(frame, conditions[index])
    return frame


def run_tables(
    trajectories: Sequence[Trajectory], groups: Sequence[str | None] | None = None, token_text: TokenText | None = None,
    conditions: Conditions = None,
) -> dict[str, pd.DataFrame]:
    """Every table of :data:`TABLES` by :func:`run_table`, each event summarised once for all of them."""
    summaries = [summary_of(traj) for traj in trajectories]
    return {name: run_table(summaries, name, groups, token_text, conditions) for name in TABLES}


def write_parquet(table: pd.DataFrame, target=None):
    """``table`` as Parquet (pyarrow) to a path or buffer (``None``: return the bytes)."""
    return table.to_parquet(target, index=False, engine="pyarrow")


def neutralise(value: str) -> str:
    """``value`` with a leading ``'`` if a spreadsheet would read it as a formula, else unchanged."""
    return "'" + value if value.startswith(FORMULA_LEADS) else value


def _formula_mask(column: pd.Series) -> pd.Series | None:
    """Where a text column holds a formula-leading string (None: not a text column, or none do)."""
    if not (column.dtype == object or pd.api.types.is_string_dtype(column)):
        return None
    mask = column.astype("string").str.match(_FORMULA_PATTERN).fillna(False).astype(bool)
    return mask if bool(mask.any()) else None


def formula_cells(table: pd.DataFrame) -> dict[str, list[str]]:
    """The raw values :func:`write_csv` neutralises in ``table``: column name → its distinct
    formula-leading values (in order of appearance); ``"(column names)"`` for names."""
    found: dict[str, list[str]] = {}
    names = [str(c) for c in table.columns if str(c).startswith(FORMULA_LEADS)]
    if names:
        found["(column names)"] = names
    for name in table.columns:
        mask = _formula_mask(table[name])
        if mask is not None:
            found[str(name)] = list(dict.fromkeys(table[name][mask].tolist()))
    return found


def safe_table(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every formula-leading text cell and column name neutralised (a copy where any is)."""
    masks = {name: m for name in table.columns if (m := _formula_mask(table[name])) is not None}
    renamed = {c: neutralise(c) for c in table.columns if isinstance(c, str) and c.startswith(FORMULA_LEADS)}
    if not masks and not renamed:
        return table
    table = table.copy()
    for name, mask in masks.items():
        table[name] = table[name].astype(object).where(~mask, "'" + table[name][mask].astype(str))
    return table.rename(columns=renamed)


def write_csv(table: pd.DataFrame, target=None, header: bool = True):
    """``table`` as CSV to a path or buffer (``None``: return the text), formula-leading text
    neutralised (:func:`safe_table`). Every text field is quoted: decoded canvases may hold bare
    carriage returns or commas."""
    return safe_table(table).to_csv(target, index=False, quoting=csv.QUOTE_NONNUMERIC, header=header)


def run_metadata(trajectories: Sequence[Trajectory], **extra) -> dict:
    """Model, settings, seeds, prompts, timings and package versions of a run."""
    first = trajectories[0]
    return {
        "model_id": first.model_id,
        "device": first.device,
        "sampler": first.sampler,
        "settings": first.settings.to_dict(),
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
        "events": [
            {
                "event": t.event,
                "template": t.template,
                "prompt": t.prompt,
                "seed": t.seed,
                "samples": t.n_samples,
                "canvas_length": t.canvas_length,
                "timings": t.timings,
            }
            for t in trajectories
        ],
        **extra,
    }


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | Path, metadata: dict, sidecar: str = "run.json") -> dict[str, Path]:
    """Write each table as ``<name>.csv`` (:func:`write_csv`) and ``metadata`` as the JSON
    ``sidecar`` into ``out_dir`` (created if needed), the raw values of neutralised cells under
    ``csv_neutralised``. Returns the written paths by table name (the sidecar under ``"run"``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written, raw = {}, {}
    for name, table in tables.items():
        path = out / f"{name}.csv"
        write_csv(table, path)
        written[name] = path
        if cells := formula_cells(table):
            raw[name] = cells
    if raw:
        metadata = {**metadata, "csv_neutralised": raw}
    side = out / sidecar
    side.write_text(json.dumps(metadata, indent=2, default=str, ensure_ascii=False), encoding="utf-8")
    written["run"] = side
    return written


def write_run(trajectories: Sequence[Trajectory], out_dir: str | Path, token_text: TokenText | None = None,
              **extra) -> dict[str, Path]:
    """Write ``positions.csv`` (final tokens decoded by ``token_text``), ``segments.csv``,
    ``samples.csv``, ``pairs.csv`` and ``run.json`` into ``out_dir`` (created if needed). Returns
    the written paths by table name."""
    if not trajectories:
        raise ValueError("trajectories: nothing to export")
    return write_tables(run_tables(trajectories, token_text=token_text), out_dir, run_metadata(trajectories, **extra))
