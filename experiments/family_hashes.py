"""Hashes of what both model families write, to check that moving the families into a registry
(issue 48: a family is one module plus one registration) changed no stored run, run id, CSV or API
answer.

On both embedded models (``petri-small``, uniform diffusion; ``petri-small-mdm``, masked diffusion),
with few samples and steps so it takes about a minute on one CPU thread:

- ``petri seed`` on the command line (default settings, and the uniform model with every sampler
  flag that existed before the registry), its CSVs and run.json;
- the HTTP API (FastAPI's TestClient on :func:`petri.web.app.create_app` over a
  :class:`petri.app.service.PetriService`): ``POST /api/seed`` with default and explicit settings,
  ``POST /api/study`` (its run id is a hash of the settings' stored form, recorded as it is), each
  run's ``GET /api/runs/{id}`` and its CSVs, and the answers to refused settings (422, the field
  named);
- the run store the API wrote, row by row: each run's stored request and each event's stored
  header and arrays (the arrays as loaded: the npz zip holds a clock time).

Normalised before hashing, as in ``experiments/output_fingerprint.py`` (whose helpers this uses):
clock times, durations and the random run ids of seed runs. Everything else is hashed as written.

    PYTHONPATH=$PWD python experiments/family_hashes.py --out /tmp/family-before.json
    PYTHONPATH=$PWD python experiments/family_hashes.py --out /tmp/family-after.json --compare /tmp/family-before.json
"""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_fingerprint import STUDY as FINGERPRINT_STUDY  # noqa: E402
from output_fingerprint import cli, digest, folder_digests, normalise, run_fingerprint  # noqa: E402

MODELS = ("petri-small", "petri-small-mdm")
EVENT = "Only 90 units are in stock, but the customer ordered 120."
CONCEPTS = ["order", "inventory", "person"]
#: (name, settings) of the seed requests every model answers (the settings every family had before
#: the registry: the steps and the thought-block pin)
SEEDS = [("defaults", {}), ("steps", {"max_denoising_steps": 5}), ("pinned", {"max_denoising_steps": 4, "pin_thought_channel": True})]
#: the uniform family's own settings, sent to the uniform model only
UNIFORM_SEEDS = [
    ("temperatures", {"max_denoising_steps": 5, "t_min": 0.3, "t_max": 0.9, "entropy_bound": 0.2}),
    ("no-stop", {"max_denoising_steps": 4, "adaptive_stop": False}),
    ("thresholds", {"max_denoising_steps": 6, "stability_threshold": 2, "confidence_threshold": 0.5}),
]
#: settings every model refuses (422, naming the field)
REFUSED = [("steps-0", {"max_denoising_steps": 0}), ("unknown", {"foo": 1}), ("steps-text", {"max_denoising_steps": "3"}),
           ("pin-number", {"pin_thought_channel": 1})]
#: settings the uniform model refuses
UNIFORM_REFUSED = [("t-min-low", {"t_min": 0.001}), ("t-min-over-t-max", {"t_min": 0.9, "t_max": 0.3}),
                   ("t-max-under-default-t-min", {"t_max": 0.2}), ("stop-text", {"adaptive_stop": "yes"}),
                   ("entropy-nan", {"entropy_bound": "NaN"})]
#: the fingerprint's small study under this script's own id (so its run id is its own)
STUDY = {**FINGERPRINT_STUDY, "id": "family-hashes", "title": "family hashes"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def command_line(work: Path, model: str) -> dict[str, str]:
    """``petri seed``'s files, with the default settings and (uniform) every flag it had."""
    runs = [("defaults", ["--steps", "4"])]
    if model == "petri-small":
        runs.append(("flags", ["--steps", "5", "--t-min", "0.3", "--t-max", "0.9", "--entropy-bound", "0.2",
                               "--no-adaptive-stop", "--no-thought-channel"]))
    found = {}
    for name, flags in runs:
        out = work / f"cli-{model}-{name}"
        cli("seed", "--model", model, "--event", EVENT, "--concepts", ",".join(CONCEPTS), "--samples", "2",
            "--seed", "7", "--out", str(out), *flags)
        found.update(folder_digests(out, f"cli/{model}/{name}", set()))
    return found


def stored_rows(store: Path, run_ids: set[str]) -> dict[str, str]:
    """Each run's stored request and each event's header (less its timings) and arrays, from the
    SQLite file itself."""
    import numpy as np

    found = {}
    db = sqlite3.connect(store / "petri.sqlite")
    try:
        for run_id, kind, model_id, request in db.execute("SELECT run_id, kind, model_id, request FROM runs"):
            key = run_id if kind == "study" else "seed-" + sha(request.encode())[:12]
            found[f"store/{model_id}/{key}/request"] = sha(json.dumps(normalise(json.loads(request), run_ids)).encode())
            rows = db.execute("SELECT position, event_key, grp, header, arrays FROM events WHERE run_id = ? "
                              "ORDER BY position", (run_id,))
            for position, event_key, group, header, arrays in rows:
                meta = json.loads(header)
                meta.pop("timings")
                found[f"store/{model_id}/{key}/{event_key}/header"] = sha(json.dumps([position, group, meta]).encode())
                with np.load(io.BytesIO(arrays)) as data:
                    parts = b"".join(name.encode() + str(data[name].dtype).encode() + str(data[name].shape).encode()
                                     + data[name].tobytes() for name in sorted(data.files))
                found[f"store/{model_id}/{key}/{event_key}/arrays"] = sha(parts)
    finally:
        db.close()
    return found


def http_api(work: Path, model: str) -> dict[str, str]:
    """The API's answers (seeds, refusals, a study, each run read back with its CSVs) and the store it wrote."""
    import torch
    from fastapi.testclient import TestClient

    from petri.app.service import PetriService
    from petri.engine.select import load_backend_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    torch.set_num_threads(1)
    store = work / f"api-store-{model}"
    service = PetriService(load_backend_model(model, device="cpu"), RunStore(store))
    app = create_app(service, ui=False)
    uniform = model == "petri-small"
    found: dict[str, str] = {}
    run_ids: set[str] = set()
    with TestClient(app) as client:
        for name, settings in SEEDS + (UNIFORM_SEEDS if uniform else []):
            body = {"concepts": CONCEPTS, "samples": 2, "seed": 3, "settings": settings, "include_trajectories": True,
                    "events": [{"event": EVENT, "group": "contradictory"}, {"event": "The order shipped.", "group": "benign"}]}
            answer = client.post("/api/seed", json=body)
            assert answer.status_code == 200, (name, answer.text)
            run_id = answer.json()["run_id"]
            run_ids.add(run_id)
            found[f"api/{model}/seed/{name}.json"] = digest("seed.json", answer.content, {run_id})
            read = client.get(f"/api/runs/{run_id}", params={"include_trajectories": True})
            found[f"api/{model}/seed/{name}/run.json"] = digest("run.json", read.content, {run_id})
            for table in ("positions", "segments", "samples", "pairs", "steps"):
                got = client.get(f"/api/runs/{run_id}/{table}.csv")
                assert got.status_code == 200, got.text
                found[f"api/{model}/seed/{name}/{table}.csv"] = digest(f"{table}.csv", got.content, {run_id})
        for name, settings in REFUSED + (UNIFORM_REFUSED if uniform else []):
            answer = client.post("/api/seed", json={"concepts": CONCEPTS, "event": EVENT, "samples": 1,
                                                    "settings": settings})
            assert answer.status_code == 422, (name, answer.text)
            found[f"api/{model}/refused/{name}"] = sha(answer.content)  # the answer as sent, byte for byte
        answer = client.post("/api/study", json={"study": STUDY, "samples": 2, "seed": 5,
                                                 "settings": {"max_denoising_steps": 3}})
        assert answer.status_code == 200, answer.text
        study_id = answer.json()["run_id"]
        found[f"api/{model}/study/run_id"] = study_id  # a hash of the study, the model and the settings
        found[f"api/{model}/study.json"] = digest("study.json", answer.content, set())
        read = client.get(f"/api/runs/{study_id}")
        found[f"api/{model}/study/run.json"] = digest("run.json", read.content, set())
        for table in ("positions", "samples", "pairs"):
            found[f"api/{model}/study/{table}.csv"] = digest(f"{table}.csv", client.get(
                f"/api/runs/{study_id}/{table}.csv").content, set())
    service.store.close()
    found.update(stored_rows(store, run_ids))
    return found


def main(argv=None) -> int:
    return run_fingerprint(argv, doc=__doc__, models=MODELS, collectors=(command_line, http_api),
                           work_name="petri-family-hashes")


if __name__ == "__main__":
    sys.exit(main())
