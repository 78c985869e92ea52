"""Tidy CSV export with a JSON sidecar that records everything a methods section needs."""

from __future__ import annotations

import csv
import json
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pandas as pd

from petri.replay import steps_table
from petri.tables import pairs_table, positions_table, samples_table, segments_table
from petri.trajectory import Trajectory

TABLES = {
    "positions": positions_table,
    "segments": segments_table,
    "samples": samples_table,
    "pairs": pairs_table,
}

_VERSIONED = ("torch", "transformers", "numpy", "scipy", "pandas", "plotly", "textblob")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run_table(
    trajectories: Sequence[Trajectory], name: str, groups: Sequence[str | None] | None = None
) -> pd.DataFrame:
    """One tidy table (``name`` in :data:`TABLES`) over all trajectories (one per event), rows tagged
    with event and model; with ``groups`` (one label per trajectory), also ``event_index`` and
    ``group`` beside ``event``."""
    frames = []
    for index, traj in enumerate(trajectories):
        frame = TABLES[name](traj)
        if groups is not None:
            frame.insert(1, "group", groups[index] if groups[index] is not None else "")
            frame.insert(1, "event_index", index)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def run_tables(
    trajectories: Sequence[Trajectory], groups: Sequence[str | None] | None = None
) -> dict[str, pd.DataFrame]:
    """Every table of :data:`TABLES` by :func:`run_table`."""
    return {name: run_table(trajectories, name, groups) for name in TABLES}


def run_steps_table(
    trajectories: Sequence[Trajectory], decode, groups: Sequence[str | None] | None = None
) -> pd.DataFrame:
    """The per-step record of every trajectory (:func:`petri.replay.steps_table`, ``decode`` an id →
    text callable) with ``event_index`` and ``group`` in front: one row per (event, sample, step run,
    position)."""
    frames = []
    for index, traj in enumerate(trajectories):
        frame = steps_table(traj, decode)
        frame.insert(0, "group", (groups[index] if groups is not None else None) or "")
        frame.insert(0, "event_index", index)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def write_parquet(table: pd.DataFrame, target=None):
    """``table`` as Parquet (pyarrow) to a path or buffer (``None``: return the bytes)."""
    return table.to_parquet(target, index=False, engine="pyarrow")


def write_csv(table: pd.DataFrame, target=None):
    """``table`` as CSV to a path or buffer (``None``: return the text). Every text field is quoted:
    decoded canvases may hold bare carriage returns or commas."""
    return table.to_csv(target, index=False, quoting=csv.QUOTE_NONNUMERIC)


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
    """Write each table as ``<name>.csv`` and ``metadata`` as the JSON ``sidecar`` into ``out_dir``
    (created if needed). Returns the written paths by table name (the sidecar under ``"run"``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, table in tables.items():
        path = out / f"{name}.csv"
        write_csv(table, path)
        written[name] = path
    side = out / sidecar
    side.write_text(json.dumps(metadata, indent=2, default=str, ensure_ascii=False), encoding="utf-8")
    written["run"] = side
    return written


def write_run(trajectories: Sequence[Trajectory], out_dir: str | Path, **extra) -> dict[str, Path]:
    """Write ``positions.csv``, ``segments.csv``, ``samples.csv``, ``pairs.csv`` and ``run.json``
    into ``out_dir`` (created if needed). Returns the written paths by table name."""
    if not trajectories:
        raise ValueError("trajectories: nothing to export")
    return write_tables(run_tables(trajectories), out_dir, run_metadata(trajectories, **extra))
