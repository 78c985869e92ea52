"""Faults: the real server SIGKILLed in the middle of a study, then restarted; run stores that cannot
be written (at startup, when the disk fills up). A folder that turns read-only *while* serving is not
tested (Linux refuses to remount a tmpfs read-only while SQLite holds it open; see RELIABILITY.md).

- Kill: ``python app.py`` (embedded model, subprocess) runs a study posted to ``POST /api/study``;
  once some batches are committed it is SIGKILLed. The SQLite store passes ``PRAGMA
  integrity_check``; after a restart the same request resumes (only the missing batches are
  computed), the batches stored before the kill are byte-for-byte unchanged, and the run ends done.
- Unwritable store at startup: ``app.py`` exits with status 2 and a message naming the store,
  before any model is loaded.
- Full disk while serving (a size-limited tmpfs; skipped where mounting is not permitted): the
  request gets a 507 whose detail says why, the server keeps answering, stored runs stay readable,
  and once space is back requests succeed again without a restart. The CLI study reports a full
  disk with exit status 2 and the reason.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

import petri.web.server as app_module
from petri.app.service import PetriService
from petri.runs.store import RunStore
from petri.web.app import create_app
from reliability_support import EMBEDDED, HEAVY, REPO, AppProcess, integrity, remount, stored_rows, tmpfs
from study_support import numbered_events, study_dict
from tiny_support import save_checkpoint

EVENTS = 8
STUDY = study_dict("kill-server", "Server kill test", templates=1, events=numbered_events(range(EVENTS // 2), "case {i}"),
                   comparison=False)
STUDY_BODY = {"study": STUDY, "samples": 2, "seed": 7, "settings": {"max_denoising_steps": 8, "adaptive_stop": False}}
FIGURES: dict[str, object] = {}


def test_sigkill_during_a_study_then_restart_resumes(tmp_path):
    store = tmp_path / "store"
    db = store / "petri.sqlite"
    args = ("--model", str(EMBEDDED), "--device", "cpu", "--store", str(store))
    first = AppProcess(*args, log=tmp_path / "server1.log").start()
    outcome: dict[str, object] = {}

    def post_study() -> None:
        try:
            outcome["response"] = httpx.post(first.url + "/api/study", json=STUDY_BODY, timeout=600)
        except httpx.HTTPError as err:  # the server dies under it
            outcome["error"] = err

    client = threading.Thread(target=post_study, daemon=True)
    client.start()
    try:
        deadline = time.monotonic() + 300
        while len(stored_rows(db)) < 2:
            assert first.alive, f"the server exited during the study:\n{first.tail()}"
            assert "response" not in outcome, f"the study ended before the kill: {outcome['response'].text[:300]}"
            assert time.monotonic() < deadline, "no batch reached the store"
            time.sleep(0.01)
        assert first.kill() == -9
    finally:
        first.stop()
    client.join(60)
    assert "error" in outcome, outcome  # the client saw the connection drop, not an answer

    # the store after the crash: intact, some batches stored, the run still marked running
    at_kill = stored_rows(db)
    assert 2 <= len(at_kill) < EVENTS, f"the kill did not land midway ({len(at_kill)}/{EVENTS} batches)"
    assert integrity(db) == "ok"
    with sqlite3.connect(db) as conn:
        (run_id, status), = conn.execute("SELECT run_id, status FROM runs").fetchall()
    conn.close()
    assert status == "running"
    assert {row[0] for row in at_kill.values()} == {run_id}

    # restart on the same store; the same request resumes the run
    with AppProcess(*args, log=tmp_path / "server2.log") as second:
        r = httpx.post(second.url + "/api/study", json=STUDY_BODY, timeout=600)
        assert r.status_code == 200, r.text[:500]
        result = r.json()
        assert result["run_id"] == run_id and result["status"] == "done"
        assert result["resumed"] == len(at_kill) and result["computed"] == EVENTS - len(at_kill)
        run = httpx.get(f"{second.url}/api/runs/{run_id}", timeout=60).json()
        assert run["status"] == "done" and run["error"] is None and len(run["events"]) == EVENTS
        assert [e["event"] for e in run["events"]] == [e["text"] for e in STUDY["events"]]
        resumed_tables = {}
        for table in ("positions", "segments", "samples", "pairs"):
            csv = httpx.get(f"{second.url}/api/runs/{run_id}/{table}.csv", timeout=60)
            assert csv.status_code == 200 and csv.text.count("\n") > EVENTS
            resumed_tables[table] = csv.text
        # posting it once more returns the finished run at once, nothing recomputed
        again = httpx.post(second.url + "/api/study", json=STUDY_BODY, timeout=600).json()
        assert again["computed"] == 0 and again["resumed"] == EVENTS
    after = stored_rows(db)
    assert len(after) == EVENTS
    for key, row in at_kill.items():  # every batch finished before the kill is kept, byte for byte
        assert after[key] == row, key
    assert integrity(db) == "ok"
    FIGURES["kill"] = {"batches": EVENTS, "stored_at_kill": len(at_kill), "resumed": result["resumed"],
                       "computed_after_restart": result["computed"], "integrity": "ok"}

    if HEAVY:  # the resumed run equals an uninterrupted one (same thread count, fresh store)
        with AppProcess(*args[:-1], str(tmp_path / "clean"), log=tmp_path / "server3.log") as clean:
            r = httpx.post(clean.url + "/api/study", json=STUDY_BODY, timeout=600).json()
            assert r["run_id"] == run_id and r["computed"] == EVENTS
            for table, resumed_csv in resumed_tables.items():
                fresh = httpx.get(f"{clean.url}/api/runs/{run_id}/{table}.csv", timeout=60).text
                assert fresh == resumed_csv, f"{table}: the resumed run differs from an uninterrupted one"
    print(f"\nfault figures: {FIGURES}")


# ----------------------------------------------------------------------------------- unwritable at startup


@pytest.fixture()
def no_model_loading(monkeypatch):
    """Fail loudly if app.py loads a model before it has checked the store."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the run store was checked")

    monkeypatch.setattr(app_module, "load_from_args", refuse)


def unwritable_stores(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "petri.sqlite").write_bytes(b"this is not a database" * 100)
    return {"a file where the folder should be": a_file, "a folder under a file": a_file / "runs",
            "a corrupt database file": corrupt}


@pytest.mark.parametrize("case", ["a file where the folder should be", "a folder under a file", "a corrupt database file"])
def test_unwritable_store_fails_at_startup_with_a_clear_message(case, tmp_path, capsys, no_model_loading):
    store = unwritable_stores(tmp_path)[case]
    assert app_module.main(["--store", str(store), "--model", "whatever"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run store ") and str(store) in err, err
    assert "cannot open or write it" in err, err


def test_read_only_filesystem_store_fails_at_startup(capsys, no_model_loading):
    with tmpfs("64k", read_only=True) as folder:
        if folder is None:
            pytest.skip("mounting a tmpfs is not permitted here (needs root)")
        assert app_module.main(["--store", str(folder / "runs"), "--model", "whatever"]) == 2
        err = capsys.readouterr().err
        assert "error: run store" in err and "Read-only file system" in err, err


def test_app_process_exits_2_on_an_unwritable_store(tmp_path):
    """The real command line: non-zero exit status and the reason on stderr, no traceback."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    done = subprocess.run([sys.executable, "app.py", "--store", str(a_file)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: run store" in done.stderr and "cannot open or write it" in done.stderr
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------------- full disk while serving


def test_full_disk_while_serving(tiny_lm, live_server):
    with tmpfs("192k") as folder:  # the schema (runs, events, jobs, owners, results) and a run or two
        if folder is None:
            pytest.skip("mounting a tmpfs is not permitted here (needs root)")
        store = RunStore(folder)
        service = PetriService(tiny_lm, store)
        body = {"concepts": ["order", "person"], "event": "A lamp was ordered.", "samples": 4,
                "settings": {"max_denoising_steps": 8, "adaptive_stop": False}}
        with live_server(create_app(service, ui=False)) as server, httpx.Client(base_url=server.url, timeout=120) as c:
            stored, refused = [], None
            for seed in range(200):
                r = c.post("/api/seed", json={**body, "seed": seed})
                if r.status_code != 200:
                    refused = r
                    break
                stored.append(r.json()["run_id"])
            assert refused is not None, "the 192 KiB disk never filled up"
            assert refused.status_code == 507, refused.text
            assert "database or disk is full" in refused.json()["detail"], refused.text
            assert stored, "not one run fitted before the disk was full"

            # the server keeps answering and every run stored before is intact
            assert c.get("/api/health").status_code == 200 and not service.busy
            for run_id in stored:
                assert c.get(f"/api/runs/{run_id}/segments.csv").status_code == 200
            study = c.post("/api/study", json={**STUDY_BODY, "samples": 1})
            assert study.status_code == 507 and "full" in study.json()["detail"], study.text

            # space is back (the tmpfs grows): the same server stores runs again, no restart needed
            assert remount(folder, "size=4m")
            r = c.post("/api/seed", json={**body, "seed": 1000})
            assert r.status_code == 200, r.text
            assert c.get(f"/api/runs/{r.json()['run_id']}").json()["status"] == "done"
        store.close()
        assert integrity(folder / "petri.sqlite") == "ok"
        FIGURES["full_disk"] = {"runs_stored_before_full": len(stored), "refusal": refused.status_code}


@pytest.fixture()
def torch_threads():
    """The CLI's --threads sets torch's thread count for the whole process: put it back after."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_cli_study_reports_a_full_disk_and_resumes_once_there_is_space(tmp_path, capsys, torch_threads):
    from petri.cli.main import main as cli_main
    from petri.engine.torch.tiny import tiny_random_model

    checkpoint = tmp_path / "tiny-ckpt"
    lm = tiny_random_model(canvas_length=16, seed=3)
    save_checkpoint(lm, checkpoint)
    study_file = tmp_path / "study.json"
    study_file.write_text(json.dumps({**STUDY, "events": STUDY["events"][:2] + STUDY["events"][-2:]}))
    events = 4
    with tmpfs("144k") as folder:  # room for the schema and a batch or two
        if folder is None:
            pytest.skip("mounting a tmpfs is not permitted here (needs root)")
        command = ["study", str(study_file), "--model", str(checkpoint), "--store", str(folder),
                   "--out", str(tmp_path / "out"), "--samples", "8", "--steps", "8", "--no-adaptive-stop",
                   "--no-images", "--quiet", "--top-n", "5", "--threads", "1"]
        code = cli_main(command)
        err = capsys.readouterr().err
        assert code == 2, err
        assert "error: run store" in err and "database or disk is full" in err, err
        db = folder / "petri.sqlite"
        kept = stored_rows(db)
        assert 1 <= len(kept) < events, f"the disk filled at an unexpected point ({len(kept)} batches stored)"
        assert integrity(db) == "ok"

        # space is back: the same command resumes; nothing stored before the failure is recomputed
        assert remount(folder, "size=8m")
        assert cli_main(command) == 0, capsys.readouterr().err
        assert f"{events - len(kept)} batches computed, {len(kept)} resumed" in capsys.readouterr().out
        after = stored_rows(db)
        assert len(after) == events and all(after[key] == row for key, row in kept.items())
        assert integrity(db) == "ok"
        FIGURES["cli_full_disk"] = {"batches_kept_when_full": len(kept), "resumed_after": len(kept)}
