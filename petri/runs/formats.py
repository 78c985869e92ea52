"""A stored run's tables and the file formats they are written in, as two registries read by the
route ``GET /api/runs/{run_id}/{table}.{fmt}``, by ``petri replay --out FILE.{fmt}`` and by the UI's
replay bundle. A new format is one :func:`register_format` call; a new table one
:func:`register_table` call. (``petri seed --out`` and a study's folder still write their CSVs
through :func:`petri.runs.export.write_tables`.)

Tables (:data:`RUN_TABLES`): the tidy ``positions``, ``segments``, ``samples`` and ``pairs``
(:data:`petri.runs.export.TABLES`, one chunk per event) and ``steps``, the per-step record (one chunk
per (event, sample)); and the tables of runs that store JSON documents instead of trajectories
(:data:`RESULT_TABLES`, :class:`ResultTable`: a probe read's ``reads`` and ``top_k``, an
evaluation's ``predictions``, ``summary`` and ``reliability``, :mod:`petri.runs.probe_results`). Formats (:data:`FORMATS`): ``csv``
(streamed chunk by chunk, formula-leading text neutralised by :func:`petri.runs.export.write_csv`) and ``parquet`` (the chunks joined, then
written at once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from petri.core.recorded import RECORDED
from petri.core.trajectory import Trajectory
from petri.measure.replay import steps_table
from petri.runs.export import TABLES, Conditions, TokenText, event_table, with_condition, write_csv, write_parquet
from petri.runs.probe_results import PROBE_TABLES

#: one label per event (``None``: no group)
Groups = Sequence[str | None]


@dataclass(frozen=True)
class TableFormat:
    """How a table is written. ``encode(chunk, first)`` gives the bytes of one chunk (``first``: the
    chunk that opens the file, e.g. with the CSV header). A format that ``streams`` writes chunk by
    chunk, the file being their concatenation; one that does not gets all chunks joined in one."""

    suffix: str
    media_type: str
    encode: Callable[[pd.DataFrame, bool], bytes]
    streams: bool


@dataclass(frozen=True)
class RunTable:
    """A table of a run. ``chunks(trajectories, groups, decode, conditions)`` yields its rows piece by
    piece (so a download never holds the whole table), ``decode`` turning token ids (1-D array) into
    texts, or ``None`` where no tokenizer of the run's model is at hand (token texts are then empty);
    ``conditions`` (one per event, a paired study's run; else ``None``) tags each row with the
    condition it was sampled under (:func:`petri.runs.export.with_condition`)."""

    name: str
    chunks: Callable[[Sequence[Trajectory], Groups, TokenText | None, Conditions], Iterator[pd.DataFrame]]


@dataclass(frozen=True)
class ResultTable:
    """A table of a run that stores JSON documents instead of trajectories (a probe read, an
    evaluation): ``chunks(results)`` yields its rows from the run's documents by name
    (:meth:`petri.runs.store.RunStore.load_results`); ``kind`` is the run kind that has it."""

    name: str
    chunks: Callable[[dict[str, dict]], Iterator[pd.DataFrame]]
    kind: str


FORMATS: dict[str, TableFormat] = {}
RUN_TABLES: dict[str, RunTable] = {}
RESULT_TABLES: dict[str, ResultTable] = {}


def register_format(fmt: TableFormat) -> TableFormat:
    """Add ``fmt`` to :data:`FORMATS` (a suffix already there is refused: ValueError naming it)."""
    if fmt.suffix in FORMATS:
        raise ValueError(f"suffix: {fmt.suffix!r} is registered already")
    FORMATS[fmt.suffix] = fmt
    return fmt


def register_table(table: RunTable | ResultTable) -> RunTable | ResultTable:
    """Add ``table`` to :data:`RUN_TABLES` (a :class:`ResultTable` to :data:`RESULT_TABLES`; a name
    already in either is refused: ValueError naming it)."""
    if table.name in RUN_TABLES or table.name in RESULT_TABLES:
        raise ValueError(f"table: {table.name!r} is registered already")
    if isinstance(table, ResultTable):
        RESULT_TABLES[table.name] = table
    else:
        RUN_TABLES[table.name] = table
    return table


def table_format(suffix: str) -> TableFormat:
    """The format of ``suffix`` (ValueError naming the registered ones)."""
    if suffix not in FORMATS:
        raise ValueError(f"fmt: {suffix[:20]!r} is not one of {', '.join(FORMATS)}")
    return FORMATS[suffix]


def run_table(name: str) -> RunTable:
    """The table called ``name`` (ValueError naming the registered ones)."""
    if name not in RUN_TABLES:
        raise ValueError(f"table: {name[:40]!r} is not one of {', '.join(RUN_TABLES)}")
    return RUN_TABLES[name]


def any_table(name: str) -> RunTable | ResultTable:
    """The trajectory table or result table called ``name`` (ValueError naming them all)."""
    if name in RESULT_TABLES:
        return RESULT_TABLES[name]
    if name not in RUN_TABLES:
        raise ValueError(f"table: {name[:40]!r} is not one of {', '.join([*RUN_TABLES, *RESULT_TABLES])}")
    return RUN_TABLES[name]


def encoded(chunks: Iterator[pd.DataFrame], fmt: str) -> Iterator[bytes]:
    """``chunks`` (one table's rows, piece by piece) as the bytes of format ``fmt``: one piece
    each for a format that streams, else one for the whole table."""
    writer = table_format(fmt)
    if writer.streams:
        for index, chunk in enumerate(chunks):
            yield writer.encode(chunk, index == 0)
    else:
        yield writer.encode(pd.concat(list(chunks), ignore_index=True), True)


def result_table_bytes(results: dict[str, dict], table: str, fmt: str) -> Iterator[bytes]:
    """Result table ``table`` (:data:`RESULT_TABLES`) of a run's stored documents in format ``fmt``."""
    return encoded(RESULT_TABLES[table].chunks(results), fmt)


def table_bytes(trajectories: Sequence[Trajectory], table: str, fmt: str, groups: Groups,
                decode: TokenText | None, conditions: Conditions = None) -> Iterator[bytes]:
    """Table ``table`` of a run (one trajectory per event) in format ``fmt``, as the bytes of its
    chunks (one, for a format that does not stream); ``conditions``: see :class:`RunTable`."""
    chunks = run_table(table).chunks(trajectories, groups, decode, conditions)
    table_format(fmt)  # an unknown format is refused before the first chunk is read
    yield from encoded(chunks, fmt)


def write_table(path, trajectories: Sequence[Trajectory], table: str, fmt: str, groups: Groups,
                decode: TokenText | None, conditions: Conditions = None):
    """Write :func:`table_bytes` to the file ``path`` (a ``pathlib.Path``), chunk by chunk; returns ``path``."""
    with path.open("wb") as f:
        for chunk in table_bytes(trajectories, table, fmt, groups, decode, conditions):
            f.write(chunk)
    return path


# ------------------------------------------------------------------------------ the built-in entries
def one_sample(traj: Trajectory, s: int) -> Trajectory:
    """Sample ``s`` of ``traj`` alone (a one-sample trajectory; for writing one sample at a time)."""
    keep = slice(s, s + 1)
    per_sample = (*(f.name for f in RECORDED if f.per_sample), "anchors", "final_texts")  # the sample axis first
    fields: dict[str, Any] = {name: None if getattr(traj, name) is None else getattr(traj, name)[keep] for name in per_sample}
    return replace(traj, **fields)


def per_id(decode: TokenText | None) -> Callable[[int], str]:
    """``decode`` (ids → texts) as one id → its text (cached); every text empty without ``decode``."""
    if decode is None:
        return lambda token_id: ""
    return lru_cache(maxsize=65536)(lambda token_id: decode(np.array([token_id]))[0] if token_id >= 0 else "")


def _tidy(name: str) -> RunTable:
    def chunks(trajectories: Sequence[Trajectory], groups: Groups, decode: TokenText | None,
               conditions: Conditions = None) -> Iterator[pd.DataFrame]:
        for index, traj in enumerate(trajectories):
            yield event_table(traj, name, index, groups, decode, conditions)

    return RunTable(name, chunks)


def _steps_chunks(trajectories: Sequence[Trajectory], groups: Groups, decode: TokenText | None,
                  conditions: Conditions = None) -> Iterator[pd.DataFrame]:
    """The per-step record (:func:`petri.measure.replay.steps_table`), one (event, sample) at a time:
    ``event_index, group`` (``condition`` and ``dose`` with ``conditions``), ``sample, step, position,
    token_id, token_text, entropy, accepted, anchor``."""
    text = per_id(decode)
    for index, traj in enumerate(trajectories):
        for s in range(traj.n_samples):
            frame = steps_table(one_sample(traj, s), text)
            frame["sample"] = s
            frame.insert(0, "group", groups[index] or "")
            frame.insert(0, "event_index", index)
            yield with_condition(frame, conditions[index]) if conditions is not None else frame


for _name in TABLES:
    register_table(_tidy(_name))
register_table(RunTable("steps", _steps_chunks))
for _name, _chunks, _kind in PROBE_TABLES:
    register_table(ResultTable(_name, _chunks, _kind))
register_format(TableFormat("csv", "text/csv; charset=utf-8",
                            lambda chunk, first: write_csv(chunk, header=first).encode("utf-8"), streams=True))
register_format(TableFormat("parquet", "application/vnd.apache.parquet",
                            lambda chunk, first: write_parquet(chunk), streams=False))
