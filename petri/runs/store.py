"""The run store: every finished event of a run is committed to SQLite before the next starts.

A crash loses at most the event in flight; rerunning the same run id skips the events already
stored. One database file (``petri.sqlite``) in a configurable folder, in WAL mode so readers (the
HTTP API) never block the writer. Trajectories are stored whole (compressed numpy arrays plus a
JSON header), so every table and figure can be recomputed from the store alone.
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Collection
from dataclasses import asdict, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import numpy as np

from petri.core.recorded import RECORDED
from petri.core.trajectory import AnchorSpan, Trajectory, settings_from_dict

RUN_ID_PATTERN = re.compile(r"^[0-9a-f]{8,64}$")
#: The arrays of a stored trajectory (:data:`petri.core.recorded.RECORDED`), the required ones first.
_ARRAYS = tuple(f.name for f in RECORDED if not f.optional)
#: Arrays a trajectory may lack (runs stored before they were recorded load them as ``None``).
_OPTIONAL_ARRAYS = tuple(f.name for f in RECORDED if f.optional)
#: The JSON header: every other field of :class:`Trajectory`, in its order, each written as
#: :data:`_ENCODE` says (else as it is); :func:`trajectory_from_blobs` reads them back.
HEADER_KEYS = tuple(f.name for f in fields(Trajectory) if f.name not in _ARRAYS + _OPTIONAL_ARRAYS)
_ENCODE: dict[str, Callable[[Any], Any]] = {
    "anchors": lambda anchors: [[asdict(a) for a in spans] for spans in anchors],
    "settings": lambda settings: settings.to_dict(),
}
#: How a header key of a run stored before it existed reads back: from the header read so far
#: (``settings`` is decoded first). The others are required.
_MISSING: dict[str, Callable[[dict], Any]] = {
    "sampler": lambda meta: "unknown",
    "family": lambda meta: meta["settings"].FAMILY,
    "mask_id": lambda meta: None,
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model_id TEXT NOT NULL,
    request TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    error TEXT
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    position INTEGER NOT NULL,
    event_key TEXT NOT NULL,
    grp TEXT,
    header TEXT NOT NULL,
    arrays BLOB NOT NULL,
    stored_at TEXT NOT NULL,
    PRIMARY KEY (run_id, event_key)
);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    owner TEXT,
    status TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_time ON jobs (created_at);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    stored_at TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS run_owners (
    run_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    PRIMARY KEY (run_id, owner)
);
"""

#: What a job can be while a process runs it; anything else is final.
_UNFINISHED = ("queued", "running")


class StoreError(RuntimeError):
    """The run store cannot be opened or written (unwritable folder, full disk, corrupt file)."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def check_run_id(run_id: str) -> str:
    """Run ids are lowercase hex (8-64 characters); anything else (``../``, slashes) is refused."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
        raise ValueError(f"run_id: {run_id!r} is not a run id (8-64 lowercase hex characters)")
    return run_id


def trajectory_to_blobs(traj: Trajectory) -> tuple[str, bytes]:
    """(JSON header, compressed npz bytes) holding the whole trajectory."""
    buffer = io.BytesIO()
    arrays = {name: getattr(traj, name) for name in _ARRAYS + _OPTIONAL_ARRAYS}
    np.savez_compressed(buffer, **{name: array for name, array in arrays.items() if array is not None})
    header = {key: _ENCODE.get(key, _same)(getattr(traj, key)) for key in HEADER_KEYS}
    return json.dumps(header), buffer.getvalue()


def _same(value: Any) -> Any:
    return value


def trajectory_from_blobs(header: str, arrays: bytes) -> Trajectory:
    stored = json.loads(header)
    with np.load(io.BytesIO(arrays)) as data:
        loaded = {name: data[name] for name in _ARRAYS}
        loaded.update({name: data[name] if name in data.files else None for name in _OPTIONAL_ARRAYS})
    # runs stored before "family": their settings by their keys
    meta: dict[str, Any] = {"settings": settings_from_dict(stored["settings"], stored.get("family"))}
    for key in HEADER_KEYS:
        if key == "anchors":
            meta[key] = [[AnchorSpan(a["concept"], a["start"], tuple(a["token_ids"])) for a in spans]
                         for spans in stored[key]]
        elif key != "settings":
            meta[key] = stored[key] if key in stored or key not in _MISSING else _MISSING[key](meta)
    return Trajectory(**loaded, **meta)


class RunStore:
    """SQLite-backed store of runs and their per-event trajectories (thread-safe)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / "petri.sqlite"
        self._lock = threading.Lock()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as err:
            raise StoreError(f"run store {self.path}: cannot open or write it ({err})") from err

    def _write(self, sql: str, params: tuple) -> None:
        with self._lock:
            try:
                self._db.execute(sql, params)
            except sqlite3.Error as err:
                raise StoreError(f"run store {self.path}: write failed ({err})") from err

    def _read(self, sql: str, params: tuple) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def create_run(self, run_id: str, kind: str, model_id: str, request: dict, owner: str | None = None) -> bool:
        """Register a run (``owner``, a token hash, may then open it on a public server:
        :meth:`add_run_owner`); returns False (and changes nothing else) when it already exists (a resume)."""
        check_run_id(run_id)
        existed = bool(self._read("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)))
        if not existed:
            self._write(
                "INSERT INTO runs (run_id, kind, model_id, request, status, created_at) VALUES (?, ?, ?, ?, 'running', ?)",
                (run_id, kind, model_id, json.dumps(request, default=str), _now()),
            )
        else:
            self._write("UPDATE runs SET status = 'running', error = NULL WHERE run_id = ?", (run_id,))
        if owner is not None:
            self.add_run_owner(run_id, owner)
        return not existed

    def save_event(self, run_id: str, position: int, event_key: str, traj: Trajectory, group: str | None = None) -> None:
        """Commit one finished event (durably, before returning)."""
        header, arrays = trajectory_to_blobs(traj)
        self._write(
            "INSERT OR REPLACE INTO events (run_id, position, event_key, grp, header, arrays, stored_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (check_run_id(run_id), position, event_key, group, header, arrays, _now()),
        )

    def save_result(self, run_id: str, name: str, payload: dict) -> None:
        """Commit one named JSON document of a run (durably, before returning), replacing one of
        that name: what a run that is not trajectories stores (a probe read, an evaluation)."""
        self._write(
            "INSERT OR REPLACE INTO results (run_id, name, payload, stored_at) VALUES (?, ?, ?, ?)",
            (check_run_id(run_id), name, json.dumps(payload, allow_nan=False), _now()),
        )

    def load_results(self, run_id: str) -> dict[str, dict]:
        """Every stored JSON document of a run by name (:meth:`save_result`), in the order stored."""
        rows = self._read("SELECT name, payload FROM results WHERE run_id = ? ORDER BY rowid", (check_run_id(run_id),))
        return {name: json.loads(payload) for name, payload in rows}

    def drop_results(self, run_id: str, prefix: str) -> None:
        """Delete a run's documents whose names start with ``prefix`` (pieces a whole document replaced)."""
        self._write("DELETE FROM results WHERE run_id = ? AND substr(name, 1, ?) = ?",
                    (check_run_id(run_id), len(prefix), prefix))

    def finish_run(self, run_id: str, status: str = "done", error: str | None = None) -> None:
        self._write(
            "UPDATE runs SET status = ?, finished_at = ?, error = ? WHERE run_id = ?",
            (status, _now(), error, check_run_id(run_id)),
        )

    def completed_events(self, run_id: str) -> set[str]:
        return {row[0] for row in self._read("SELECT event_key FROM events WHERE run_id = ?", (check_run_id(run_id),))}

    def load_events(self, run_id: str, skip: Collection[str] = ()) -> list[tuple[str, str | None, Trajectory]]:
        """(event_key, group, trajectory) of every stored event, in run order; the events whose keys
        are in ``skip`` (ones a reader already holds) are left out without being read."""
        check_run_id(run_id)
        if skip:
            keys = [k for (k,) in self._read("SELECT event_key FROM events WHERE run_id = ?", (run_id,)) if k not in skip]
            if not keys:
                return []
            rows = self._read(
                f"SELECT event_key, grp, header, arrays FROM events WHERE run_id = ? AND event_key IN "
                f"({', '.join('?' * len(keys))}) ORDER BY position", (run_id, *keys))
        else:
            rows = self._read(
                "SELECT event_key, grp, header, arrays FROM events WHERE run_id = ? ORDER BY position", (run_id,))
        return [(key, grp, trajectory_from_blobs(header, arrays)) for key, grp, header, arrays in rows]

    def get_run(self, run_id: str) -> dict | None:
        rows = self._read(
            "SELECT run_id, kind, model_id, request, status, created_at, finished_at, error FROM runs WHERE run_id = ?",
            (check_run_id(run_id),),
        )
        if not rows:
            return None
        keys = ("run_id", "kind", "model_id", "request", "status", "created_at", "finished_at", "error")
        run = dict(zip(keys, rows[0]))
        run["request"] = json.loads(run["request"])
        run["events_stored"] = len(self.completed_events(run_id))
        return run

    def list_runs(self, limit: int = 50) -> list[dict]:
        rows = self._read("SELECT run_id FROM runs ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,))
        return [cast(dict, self.get_run(r[0])) for r in rows]  # ids just read: each has its run

    # ------------------------------------------------------------------------------ jobs
    def save_job(self, job: dict) -> None:
        """Write a job's public state (``petri.app.jobs.Job.public()`` plus ``owner``), replacing the last."""
        state = {k: v for k, v in job.items() if k != "owner"}
        self._write(
            "INSERT OR REPLACE INTO jobs (job_id, kind, owner, status, state, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (job["job_id"], job["kind"], job.get("owner"), job["status"], json.dumps(state), job["created"]),
        )

    def get_job(self, job_id: str) -> dict | None:
        """A job's last written state plus ``owner``, or None."""
        rows = self._read("SELECT state, owner FROM jobs WHERE job_id = ?", (job_id,))
        return {**json.loads(rows[0][0]), "owner": rows[0][1]} if rows else None

    def list_jobs(self, owner: str | None = None, limit: int = 20, offset: int = 0, any_owner: bool = False) -> list[dict]:
        """Jobs newest first; only ``owner``'s unless ``any_owner``."""
        where, params = ("", ()) if any_owner else ("WHERE owner IS ?", (owner,))
        rows = self._read(
            f"SELECT state, owner FROM jobs {where} ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [{**json.loads(state), "owner": who} for state, who in rows]

    def mark_unfinished_interrupted(self) -> tuple[int, int]:
        """What a crash left ``running`` (runs) or ``queued``/``running`` (jobs) becomes
        ``interrupted`` (a stored study resumes from it). Returns (runs, jobs) changed."""
        with self._lock:
            try:
                runs = self._db.execute(
                    "UPDATE runs SET status = 'interrupted', finished_at = ?, error = 'the process running it stopped' "
                    "WHERE status = 'running'", (_now(),),
                ).rowcount
                stale = self._db.execute(
                    f"SELECT job_id, state FROM jobs WHERE status IN {_UNFINISHED}"
                ).fetchall()
                for job_id, state in stale:
                    fixed = {**json.loads(state), "status": "interrupted", "finished": _now(),
                             "error": "the process running it stopped"}
                    self._db.execute("UPDATE jobs SET status = 'interrupted', state = ? WHERE job_id = ?",
                                     (json.dumps(fixed), job_id))
            except sqlite3.Error as err:
                raise StoreError(f"run store {self.path}: write failed ({err})") from err
        return runs, len(stale)

    # ------------------------------------------------------------------------------ owners
    def add_run_owner(self, run_id: str, owner: str) -> None:
        """Let ``owner`` (a token hash) see ``run_id`` on a public server."""
        self._write("INSERT OR IGNORE INTO run_owners (run_id, owner) VALUES (?, ?)", (check_run_id(run_id), owner))

    def owns_run(self, run_id: str, owner: str | None) -> bool:
        return owner is not None and bool(
            self._read("SELECT 1 FROM run_owners WHERE run_id = ? AND owner = ?", (check_run_id(run_id), owner))
        )

    def remove_run(self, run_id: str, owner: str | None = None) -> bool:
        """Delete a run: with ``owner``, only that owner's claim, and the run itself (events and
        all) once nobody else claims it; without, the run and every claim. True if it existed."""
        check_run_id(run_id)
        with self._lock:
            try:
                if not self._db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchall():
                    return False
                if owner is not None:
                    self._db.execute("DELETE FROM run_owners WHERE run_id = ? AND owner = ?", (run_id, owner))
                    if self._db.execute("SELECT 1 FROM run_owners WHERE run_id = ?", (run_id,)).fetchall():
                        return True
                self._db.execute("BEGIN")
                for table in ("run_owners", "events", "results", "runs"):
                    self._db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                self._db.execute("COMMIT")
            except sqlite3.Error as err:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise StoreError(f"run store {self.path}: delete failed ({err})") from err
        return True

    def list_owned_runs(self, owner: str | None, limit: int = 50) -> list[dict]:
        rows = self._read(
            "SELECT r.run_id FROM runs r JOIN run_owners o ON o.run_id = r.run_id WHERE o.owner IS ? "
            "ORDER BY r.created_at DESC, r.rowid DESC LIMIT ?", (owner, limit),
        )
        return [cast(dict, self.get_run(r[0])) for r in rows]  # ids just read: each has its run

    def close(self) -> None:
        with self._lock:
            self._db.close()
