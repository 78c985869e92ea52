"""Exact, ordered column contracts of every CSV the project writes, read back from the files the
real entry points wrote: ``python -m petri seed`` (positions, segments, samples, pairs), the HTTP
API (``GET /api/runs/{id}/{table}.csv``, which adds ``event_index`` and ``group``) and a study run
through the CLI (``python -m petri study``: positions, segments, samples, events, pairs, templates,
jaccard). The lists are written out here, so any added, dropped, renamed or reordered column fails.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from petri.app.service import PetriService
from petri.cli.main import main as cli_main
from petri.engine.torch.tiny import tiny_random_model
from petri.runs.store import RunStore
from petri.web.app import create_app
from study_support import study_dict

REPO = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------- the contracts

#: Per-trajectory columns of each seed table, after the tag columns.
POSITIONS = ["sample", "position", "is_anchor", "concept", "final_token_id", "final_token", "flips", "commit_step",
             "mean_entropy", "accepted_steps"]
SEGMENTS = ["sample", "left", "right", "pair", "start", "end", "length", "instability"]
SAMPLES = ["sample", "steps", "mean_flips_free", "settled_share", "anchor_layout", "final_text",
           "anchors_intact", "n_anchors", "mean_agreement"]
PAIRS = ["pair", "n_segments", "instability"]

#: ``python -m petri seed --out``: samples and pairs start with event, template, model_id; the
#: positions and segments tables (a row per position or segment) with model_id only: repeating the
#: texts on every row made them hundreds of MB.
CLI_SEED = {
    "positions": ["model_id"] + POSITIONS,
    "segments": ["model_id"] + SEGMENTS,
    "samples": ["event", "template", "model_id"] + SAMPLES,
    "pairs": ["event", "template", "model_id"] + PAIRS,
}
#: ``GET /api/runs/{id}/{table}.csv`` (and the UI's seed downloads): event_index and group after
#: event (first in positions and segments, which carry no texts).
API = {
    "positions": ["event_index", "group", "model_id"] + POSITIONS,
    "segments": ["event_index", "group", "model_id"] + SEGMENTS,
    "samples": ["event", "event_index", "group", "template", "model_id"] + SAMPLES,
    "pairs": ["event", "event_index", "group", "template", "model_id"] + PAIRS,
}
#: ``python -m petri study --out``: ids in front instead of the event and template texts.
STUDY_KEYS = ["study_id", "event_id", "group", "template_id", "model_id"]
STUDY = {
    "positions": STUDY_KEYS + POSITIONS,
    "segments": STUDY_KEYS + SEGMENTS,
    "samples": STUDY_KEYS + SAMPLES,
    "pairs": STUDY_KEYS + PAIRS,
    "events": ["study_id", "event_id", "group", "event", "n_templates", "n_samples", "n_segments",
               "instability", "ci_low", "ci_high", "ci_informative", "mean_flips_free", "mean_steps", "stopped_early_share",
               "settled_share", "anchors_intact", "anchors_total", "mean_agreement", "n_chars", "has_digits",
               "rank"],
    "templates": ["template_id", "template"],
    # issue 23: one row per concept pair, the event-level test with raw, Holm and BH p-values
    "pair_tests": ["pair", "group_a", "group_b", "n_a", "n_b", "median_a", "median_b", "rank_biserial", "ci_low",
                   "ci_high", "u_statistic", "p_value", "p_method", "p_holm", "p_bh", "informative", "note"],
    "jaccard": ["template", "t1", "t2"],  # a square matrix over the templates that ran
}

EVENT = "Only 90 units are in stock, but 120 were ordered."
TINY_STUDY = study_dict("contract-study", "Contract study", comparison=False)


def header(text: str) -> list[str]:
    """The first row of a CSV text, as written (no pandas: duplicate or blank names stay visible)."""
    return next(csv.reader(io.StringIO(text)))


def file_header(path: Path) -> list[str]:
    return header(path.read_text(encoding="utf-8"))


#: the ``checkpoint`` fixture (tests/conftest.py): a 16-token canvas, seed 1
CHECKPOINT = {"canvas_length": 16, "seed": 1}


# ----------------------------------------------------------------------------- the checks


def test_cli_seed_writes_exactly_these_columns(checkpoint, tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "petri", "seed", "--event", EVENT, "--concepts", "order,inventory,person",
         "--samples", "2", "--steps", "3", "--model", str(checkpoint), "--device", "cpu", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.glob("*.csv")) == sorted(f"{name}.csv" for name in CLI_SEED)
    for name, columns in CLI_SEED.items():
        assert file_header(out / f"{name}.csv") == columns, name


def test_api_serves_exactly_these_columns(tmp_path):
    lm = tiny_random_model(canvas_length=16)
    app = create_app(PetriService(lm, RunStore(tmp_path / "store")), ui=False)
    body = {"concepts": ["order", "inventory", "person"], "samples": 2, "seed": 3,
            "events": [{"event": EVENT, "group": "contradictory"}, {"event": "The order shipped.", "group": "benign"}],
            "settings": {"max_denoising_steps": 3}}
    with TestClient(app) as client:
        run = client.post("/api/seed", json=body)
        assert run.status_code == 200, run.text
        run_id = run.json()["run_id"]
        assert sorted(run.json()["csv"]) == sorted(API)
        for name, columns in API.items():
            r = client.get(f"/api/runs/{run_id}/{name}.csv")
            assert r.status_code == 200, r.text
            assert header(r.text) == columns, name


def test_study_cli_writes_exactly_these_columns(checkpoint, tmp_path, capsys):
    study_file = tmp_path / "contract-study.json"
    study_file.write_text(json.dumps(TINY_STUDY), encoding="utf-8")
    out = tmp_path / "out"
    code = cli_main(["study", str(study_file), "--model", str(checkpoint), "--device", "cpu", "--out", str(out),
                     "--store", str(tmp_path / "store"), "--samples", "2", "--steps", "2", "--no-images", "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.glob("*.csv")) == sorted(f"{name}.csv" for name in STUDY)
    for name, columns in STUDY.items():
        assert file_header(out / f"{name}.csv") == columns, name


#: ``GET /api/runs/{id}/steps.csv`` / ``steps.parquet``: one row per (event, sample, step run, position).
STEPS = ["event_index", "group", "sample", "step", "position", "token_id", "token_text", "entropy", "accepted",
         "canvas_id", "canvas_text", "anchor"]


def test_steps_table_serves_exactly_these_columns(tmp_path):
    import pandas as pd

    lm = tiny_random_model(canvas_length=16)
    app = create_app(PetriService(lm, RunStore(tmp_path / "store")), ui=False)
    body = {"concepts": ["order", "inventory"], "samples": 2, "seed": 3, "event": EVENT,
            "settings": {"max_denoising_steps": 3}}
    with TestClient(app) as client:
        run_id = client.post("/api/seed", json=body).json()["run_id"]
        r = client.get(f"/api/runs/{run_id}/steps.csv")
        assert r.status_code == 200, r.text
        assert header(r.text) == STEPS
        r = client.get(f"/api/runs/{run_id}/steps.parquet")
        assert r.status_code == 200, r.text
        assert list(pd.read_parquet(io.BytesIO(r.content)).columns) == STEPS
