"""A fingerprint of everything the product writes, to check that a refactor changed no output.

Runs a fixed set of seeds and a small study on both embedded families (``petri-tiny``, uniform
diffusion; ``petri-tiny-mdm``, masked diffusion) through the command line and the HTTP API, and
writes the sha256 of every file and API answer to a JSON file. Two fingerprints taken before and after
a change should be equal; ``--compare`` says which entries differ.

What is normalised before hashing, because it differs between two runs of the same code: in JSON,
every key that holds a clock time, a duration, a version or a random id (``written_at``, ``timings``,
``versions``, ``created``, ``finished``, ``run_id``, ``job_id``, keys ending in ``_s`` or
``seconds``); in text, the run ids of this fingerprint's runs (replaced by ``RUN``), UUIDs (plotly's
div ids) and report.md's timing lines. The runs are written under one fixed folder (``--work``), so the
paths they record are the same from run to run. Everything else
(every CSV cell, every token, every statistic) is hashed as written.

    python experiments/output_fingerprint.py --out /tmp/before.json            # one thread, about 2 minutes
    python experiments/output_fingerprint.py --out /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the checkout's petri, as the command-line runs (cwd=REPO) import it
    sys.path.insert(0, str(REPO))
MODELS = ("petri-tiny", "petri-tiny-mdm")
EVENT = "Only 90 units are in stock, but the customer ordered 120."
CONCEPTS = "order,inventory,person"
VOLATILE_KEYS = {"written_at", "timings", "versions", "created", "created_at", "finished", "finished_at",
                 "started", "started_at", "updated_at", "run_id", "job_id", "store", "out", "path"}
STUDY = {
    "schema": 1, "id": "fingerprint", "title": "fingerprint", "language": "en",
    "concepts": ["order", "inventory"], "groups": ["benign", "contradictory"],
    "templates": [{"id": "t1", "text": "Event: {event}\nDescribe how {concepts} relate in this event."}],
    "events": [
        {"id": "b1", "group": "benign", "text": "The customer placed an order, and the warehouse packed it."},
        {"id": "b2", "group": "benign", "text": "The shop restocked the shelf before the order arrived."},
        {"id": "c1", "group": "contradictory", "text": "Only 90 units are in stock, but 120 were shipped from stock."},
        {"id": "c2", "group": "contradictory", "text": "The empty warehouse delivered the full order from its stock."},
    ],
}


def normalise(value, run_ids: set[str]):
    """``value`` with the volatile keys dropped and this run's ids replaced, recursively."""
    if isinstance(value, dict):
        return {k: normalise(v, run_ids) for k, v in value.items()
                if k not in VOLATILE_KEYS and not k.endswith("_s") and "seconds" not in k}
    if isinstance(value, list):
        return [normalise(v, run_ids) for v in value]
    if isinstance(value, str):
        return replace_ids(value, run_ids)
    return value


#: report.md's lines that hold clock times and durations
CLOCK_LINES = ("- Timings:", "- Started ")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def replace_ids(text: str, run_ids: set[str]) -> str:
    """``text`` with this fingerprint's run ids and any UUID (a plotly figure's div id) replaced."""
    for run_id in sorted(run_ids, key=len, reverse=True):
        text = text.replace(run_id, "RUN")
    return UUID.sub("UUID", text)


def digest(name: str, data: bytes, run_ids: set[str]) -> str:
    """sha256 of ``data`` after normalisation (JSON by its keys, anything else as text with ids replaced)."""
    if name.endswith(".json"):
        data = json.dumps(normalise(json.loads(data), run_ids), sort_keys=True).encode()
    elif name.endswith((".csv", ".md", ".txt", ".html")):
        lines = replace_ids(data.decode("utf-8"), run_ids).splitlines(keepends=True)
        data = "".join(line for line in lines if not line.startswith(CLOCK_LINES)).encode()
    return hashlib.sha256(data).hexdigest()


def cli(*args: str) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    subprocess.run([sys.executable, "-m", "petri", *args], check=True, cwd=REPO, env=env,
                   stdout=subprocess.DEVNULL)


def folder_digests(folder: Path, prefix: str, run_ids: set[str]) -> dict[str, str]:
    """Every file under ``folder`` (figures' images excepted: their bytes hold renderer metadata)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix not in (".png", ".svg", ".gif", ".mp4", ".sqlite", ".db", ".wal", ".shm"):
            rel = path.relative_to(folder).as_posix()
            found[f"{prefix}/{rel}"] = digest(path.name, path.read_bytes(), run_ids)
    return found


def store_run_ids(store: Path) -> set[str]:
    from petri.runs.store import RunStore

    runs = RunStore(store)
    try:
        return {r["run_id"] for r in runs.list_runs(limit=1000)}
    finally:
        runs.close()


def command_line(work: Path, model: str) -> dict[str, str]:
    seed_out, study_out, store = work / f"seed-{model}", work / f"study-{model}", work / f"store-{model}"
    cli("seed", "--model", model, "--event", EVENT, "--concepts", CONCEPTS, "--samples", "3", "--seed", "11",
        "--out", str(seed_out))
    study_file = work / "study.json"
    study_file.write_text(json.dumps(STUDY))
    cli("study", str(study_file), "--model", model, "--samples", "3", "--seed", "5", "--out", str(study_out),
        "--store", str(store), "--no-images", "--quiet", "--threads", "1")
    run_ids = store_run_ids(store)
    found = folder_digests(seed_out, f"cli/{model}/seed", run_ids)
    found.update(folder_digests(study_out, f"cli/{model}/study", run_ids))
    replay_out = work / f"replay-{model}"
    replay_out.mkdir()
    for n, run_id in enumerate(sorted(run_ids)):
        cli("replay", run_id, "--store", str(store), "--out", str(replay_out / f"steps-{n}.csv"))
    found.update(folder_digests(replay_out, f"cli/{model}/replay", run_ids))
    return found


def http_api(work: Path, model: str) -> dict[str, str]:
    import torch
    from fastapi.testclient import TestClient

    from petri.app.service import PetriService
    from petri.engine.select import load_backend_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    torch.set_num_threads(1)
    lm = load_backend_model(model)
    app = create_app(PetriService(lm, RunStore(work / f"api-store-{model}")), ui=False)
    body = {"concepts": CONCEPTS.split(","), "samples": 3, "seed": 9,
            "events": [{"event": EVENT, "group": "contradictory"}, {"event": "The order shipped.", "group": "benign"}]}
    found: dict[str, str] = {}
    with TestClient(app) as client:
        answer = client.post("/api/seed", json=body)
        answer.raise_for_status()
        run_id = answer.json()["run_id"]
        ids = {run_id}
        found[f"api/{model}/seed.json"] = digest("seed.json", answer.content, ids)
        full = client.get(f"/api/runs/{run_id}", params={"include_trajectories": True})
        found[f"api/{model}/run.json"] = digest("run.json", full.content, ids)
        for table in ("positions", "segments", "samples", "pairs", "steps"):
            got = client.get(f"/api/runs/{run_id}/{table}.csv")
            got.raise_for_status()
            found[f"api/{model}/{table}.csv"] = digest(f"{table}.csv", got.content, ids)
        parquet = client.get(f"/api/runs/{run_id}/steps.parquet")
        parquet.raise_for_status()
        import io

        import pandas as pd

        frame = pd.read_parquet(io.BytesIO(parquet.content))
        found[f"api/{model}/steps.parquet"] = hashlib.sha256(frame.to_csv(index=False).encode()).hexdigest()
    return found


def run_fingerprint(argv, *, doc: str, models, collectors, work_name: str) -> int:
    """The command line of a fingerprint script: each of ``collectors`` (``(work, model) -> {name:
    sha256}``) on each of ``models``, written as JSON to ``--out``; with ``--compare``, the entries
    that differ from an earlier fingerprint (exit 1 when any does). ``--work`` (emptied first)
    defaults to ``work_name`` in the temporary folder."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the fingerprint (JSON) to write")
    ap.add_argument("--compare", type=Path, default=None, help="an earlier fingerprint: list what differs")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / work_name,
                    help="where the runs are written (emptied first; kept, to diff two runs' files)")
    args = ap.parse_args(argv)
    found: dict[str, str] = {}
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    for model in models:
        for collect in collectors:
            found.update(collect(args.work, model))
    args.out.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"{len(found)} outputs hashed into {args.out}")
    if args.compare is None:
        return 0
    before = json.loads(args.compare.read_text())
    differ = sorted(k for k in set(before) | set(found) if before.get(k) != found.get(k))
    for key in differ:
        print(f"differs: {key} ({'missing before' if key not in before else 'missing now' if key not in found else 'changed'})")
    print("identical" if not differ else f"{len(differ)} of {len(set(before) | set(found))} differ")
    return 1 if differ else 0


def main(argv=None) -> int:
    return run_fingerprint(argv, doc=__doc__, models=MODELS, collectors=(command_line, http_api),
                           work_name="petri-fingerprint")


if __name__ == "__main__":
    sys.exit(main())
