"""The run's tables and their formats as registries (petri.runs.formats): every surface reads them, so a
new format is one registry entry and reaches the HTTP route, ``petri replay`` and the UI's bundle; no
route of the app is shadowed by the generic ``/api/runs/{run_id}/{table}.{fmt}``."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from petri.app.service import PetriService
from petri.engine.torch.tiny import tiny_random_model
from petri.runs import formats
from petri.runs.export import write_csv
from petri.runs.store import RunStore
from petri.web.app import create_app
from petri.web.replay_files import export_bundle, write_replay
from petri.web.tokens import TokenText

EVENTS = [{"event": "Only 90 units are in stock, but a customer ordered 120.", "group": "contradictory"},
          {"event": "The order shipped.", "group": "benign"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    lm = tiny_random_model(canvas_length=12, seed=3)
    store = RunStore(tmp_path_factory.mktemp("store"))
    app = create_app(PetriService(lm, store), ui=False)
    body = {"concepts": ["order", "inventory"], "samples": 2, "seed": 4, "events": EVENTS,
            "settings": {"max_denoising_steps": 5}}
    with TestClient(app) as client:
        run = client.post("/api/seed", json=body)
        assert run.status_code == 200, run.text
        yield client, lm, store, run.json()["run_id"]


@pytest.fixture()
def jsonl_format():
    """A format added the way a contributor would: one registry entry (removed again after the test)."""
    fmt = formats.register_format(formats.TableFormat(
        "jsonl", "application/x-ndjson",
        lambda chunk, first: chunk.to_json(orient="records", lines=True).encode("utf-8"), streams=True))
    yield fmt
    del formats.FORMATS["jsonl"]


def test_every_table_in_every_format_over_http(served):
    client, _, _, run_id = served
    for table in formats.RUN_TABLES:
        csv_text = client.get(f"/api/runs/{run_id}/{table}.csv")
        parquet = client.get(f"/api/runs/{run_id}/{table}.parquet")
        assert csv_text.status_code == parquet.status_code == 200, (table, csv_text.text[:200])
        from_csv = pd.read_csv(io.StringIO(csv_text.text), keep_default_na=False)
        from_parquet = pd.read_parquet(io.BytesIO(parquet.content))
        assert list(from_csv.columns) == list(from_parquet.columns) and len(from_csv) == len(from_parquet) > 0, table
        assert csv_text.headers["content-disposition"].endswith(f'{run_id}-{table}.csv"')
    steps = pd.read_parquet(io.BytesIO(client.get(f"/api/runs/{run_id}/steps.parquet").content))
    full = client.get(f"/api/runs/{run_id}", params={"include_trajectories": True}).json()
    # one row per (event, sample, step run, position), in that order, ids = the per-step argmax
    want = [tok for ev in full["events"] for smp in ev["samples"] for row in smp["argmax"] for tok in row]
    assert steps["token_id"].tolist() == want
    assert steps["group"].tolist()[0] == "contradictory" and steps["group"].tolist()[-1] == "benign"


def test_an_unknown_table_or_format_is_refused_naming_it(served):
    client, _, _, run_id = served
    answer = client.get(f"/api/runs/{run_id}/flips.csv")
    assert answer.status_code == 404 and "table: 'flips' is not one of positions" in answer.json()["detail"]
    answer = client.get(f"/api/runs/{run_id}/pairs.xlsx")
    assert answer.status_code == 404 and "fmt: 'xlsx' is not one of csv, parquet" in answer.json()["detail"]


def test_a_new_format_is_one_registry_entry_and_reaches_every_surface(served, jsonl_format, tmp_path):
    client, lm, store, run_id = served
    answer = client.get(f"/api/runs/{run_id}/pairs.jsonl")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in answer.text.splitlines()]
    pairs = pd.read_csv(io.StringIO(client.get(f"/api/runs/{run_id}/pairs.csv").text), keep_default_na=False)
    assert [r["pair"] for r in rows] == pairs["pair"].tolist()
    stored = store.load_events(run_id)
    path, _ = write_replay(stored, 0, 0, tmp_path / "steps.jsonl", tokens=TokenText(lm.tokenizer))  # petri replay's path
    steps = pd.read_csv(io.StringIO(client.get(f"/api/runs/{run_id}/steps.csv").text), keep_default_na=False)
    assert len(path.read_text().splitlines()) == len(steps)
    paths, _ = export_bundle([t for _, _, t in stored], [g for _, g, _ in stored], 0, 0, tmp_path / "bundle",
                             TokenText(lm.tokenizer), images=False)
    assert (tmp_path / "bundle" / "steps.jsonl") in paths


def test_a_registered_name_cannot_be_registered_twice():
    with pytest.raises(ValueError, match="suffix: 'csv' is registered already"):
        formats.register_format(formats.TableFormat("csv", "text/csv", lambda c, f: b"", True))
    with pytest.raises(ValueError, match="table: 'steps' is registered already"):
        formats.register_table(formats.RunTable("steps", lambda t, g, d: iter(())))


def test_a_streamed_csv_equals_the_whole_table_written_at_once(served):
    """The chunks (one per event) joined are byte for byte the CSV of the joined table."""
    _, lm, store, run_id = served
    stored = store.load_events(run_id)
    trajectories, groups = [t for _, _, t in stored], [g for _, g, _ in stored]
    for table in formats.RUN_TABLES:
        streamed = b"".join(formats.table_bytes(trajectories, table, "csv", groups, None))
        whole = pd.concat(list(formats.run_table(table).chunks(trajectories, groups, None)), ignore_index=True)
        assert streamed.decode("utf-8") == write_csv(whole), table


def test_no_route_is_shadowed_by_another(served):
    """Every documented GET route of a run answers its own request: the generic table route
    (``/api/runs/{run_id}/{table}.{fmt}``) cannot take ``replay.gif`` or ``trajectory.html`` away from
    the replay routes, whatever order the routers are included in."""
    client, _, _, run_id = served
    paths = [p for p, methods in client.app.openapi()["paths"].items() if p.startswith("/api/runs/{run_id}/") and "get" in methods]
    assert {"/api/runs/{run_id}/replay.gif", "/api/runs/{run_id}/trajectory.{fmt}", "/api/runs/{run_id}/{table}.{fmt}"} <= set(paths)
    for path in paths:
        answer = client.get(path.replace("{table}.{fmt}", "pairs.csv").format(run_id=run_id, fmt="html"))
        assert answer.status_code == 200, f"{path}: {answer.status_code} {answer.text[:200]}"
