"""A real crash: ``python -m petri study`` on a tiny checkpoint is SIGKILLed once the first event
is in the store; the same command then completes without recomputing what was stored, and its CSVs
equal those of an uninterrupted run in another folder."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from petri.cli.main import main
from study_support import numbered_events, study_dict

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = 2
STUDY = study_dict("kill-test", "Kill test", events=numbered_events(range(1, 5)), comparison=False)
TOTAL = len(STUDY["events"]) * TEMPLATES
# Enough steps that the run lasts a few seconds after its first commit, so the kill lands midway.
ARGS = ["--samples", "3", "--steps", "24", "--no-adaptive-stop", "--seed", "3", "--no-images", "--quiet"]


#: the ``checkpoint`` fixture (tests/conftest.py)
CHECKPOINT = {"canvas_length": 16, "seed": 5, "name": "tiny-kill-ckpt"}


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """Same intra-op thread count here and in the subprocess (1: fast on a shared 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def stored_batches(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    except sqlite3.Error:  # the schema may not exist yet
        return 0


def read_tables(folder: Path) -> dict[str, pd.DataFrame]:
    return {name: pd.read_csv(folder / f"{name}.csv") for name in ("positions", "segments", "samples", "events", "pairs", "jaccard")}


def test_sigkill_midway_then_rerun_matches_an_uninterrupted_run(checkpoint, tmp_path, capsys):
    study_file = tmp_path / "study.json"
    study_file.write_text(json.dumps(STUDY))
    store, out = tmp_path / "store", tmp_path / "out"
    command = ["study", str(study_file), "--model", str(checkpoint), "--store", str(store), "--out", str(out), *ARGS]

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "petri", *command], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = store / "petri.sqlite"
    deadline = time.monotonic() + 240
    try:
        while stored_batches(db) < TEMPLATES:  # the first event: all its templates committed
            assert proc.poll() is None, f"the study exited early: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "the first event never reached the store"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    done_at_kill = stored_batches(db)
    assert TEMPLATES <= done_at_kill < TOTAL, f"kill did not land midway ({done_at_kill}/{TOTAL} stored)"
    assert not (out / "report.md").exists()

    # The same command again (in-process, same thread count) resumes.
    assert main(command) == 0
    stdout = capsys.readouterr().out
    assert f"{TOTAL - done_at_kill} batches computed, {done_at_kill} resumed" in stdout
    assert stored_batches(db) == TOTAL

    # An uninterrupted run in another folder (fresh store) gives the same CSV numbers.
    clean_out = tmp_path / "clean"
    assert main(["study", str(study_file), "--model", str(checkpoint), "--store", str(tmp_path / "store2"), "--out", str(clean_out),
                 *ARGS]) == 0
    assert f"{TOTAL} batches computed, 0 resumed" in capsys.readouterr().out
    resumed, clean = read_tables(out), read_tables(clean_out)
    for name in resumed:
        pd.testing.assert_frame_equal(resumed[name], clean[name], check_exact=True, obj=name)
    meta = json.loads((out / "run.json").read_text())
    assert meta["batches_resumed_from_store"] == done_at_kill and meta["model_id"] == "tiny-kill-ckpt"
    report = (out / "report.md").read_text()
    assert "## Headline (event level: the independent unit)" in report and "not for DiffusionGemma" in report
