"""Helpers of the reliability tests (tests/reliability/): the real server as a subprocess
on loopback, tmpfs mounts for full or read-only disks, and read-only looks into a SQLite store."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
EMBEDDED = REPO / "assets" / "petri-tiny"
#: ``PETRI_HEAVY=1`` runs the heavier variants (more requests, more fuzzing examples).
HEAVY = os.environ.get("PETRI_HEAVY", "") not in ("", "0")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AppProcess:
    """``python app.py ARGS --port P`` as a subprocess (its output in ``log``); ``start()`` waits
    until ``GET /api/health`` answers. No ``--host``: the server's own default address is used."""

    def __init__(self, *args: str, log: Path, threads: int = 1):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "app.py", *args, "--port", str(self.port)]
        self.log = log
        self.env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
        self.env.pop("GRADIO_SERVER_NAME", None)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 240) -> AppProcess:
        self._out = open(self.log, "ab")
        self.proc = subprocess.Popen(self.args, cwd=REPO, env=self.env, stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"app.py exited with {self.proc.returncode} while starting:\n{self.tail()}")
            try:
                if httpx.get(self.url + "/api/health", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"app.py did not answer within {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.2)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> int:
        """SIGKILL: no cleanup, no atexit, no SQLite close (a crash)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        code = self.proc.wait(timeout=60)
        self._out.close()
        return code

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._out.close()

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> AppProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on ``port`` (Linux ``/proc/net/tcp*``)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            if width == 8:
                found.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1]))
            else:
                raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, 32, 8))
                found.add(socket.inet_ntop(socket.AF_INET6, raw))
    return found


def integrity(db: Path) -> str:
    """``PRAGMA integrity_check`` of a store file, opened read-write the way a restart does (so a
    hot WAL left by a crash is recovered), then closed."""
    conn = sqlite3.connect(db, timeout=10)
    try:
        return ";".join(row[0] for row in conn.execute("PRAGMA integrity_check").fetchall())
    finally:
        conn.close()


def stored_rows(db: Path) -> dict[str, tuple]:
    """event_key → (run_id, header, arrays, stored_at) of every stored event (read-only)."""
    if not db.exists():
        return {}
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            rows = conn.execute("SELECT event_key, run_id, header, arrays, stored_at FROM events").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:  # the schema may not exist yet
        return {}
    return {key: rest for key, *rest in rows}


@contextlib.contextmanager
def tmpfs(size: str = "96k", read_only: bool = False):
    """A fresh tmpfs of ``size`` mounted on a temporary folder (root only; yields ``None`` when
    mounting is not permitted here, so callers skip with a reason)."""
    folder = Path(tempfile.mkdtemp(prefix="petri-tmpfs-"))
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        folder.rmdir()
        yield None
        return
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        with contextlib.suppress(OSError):
            folder.rmdir()


def remount(folder: Path, options: str) -> bool:
    return subprocess.run(["mount", "-o", f"remount,{options}", str(folder)], capture_output=True).returncode == 0
