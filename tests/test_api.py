"""The HTTP API against a live uvicorn server on loopback (the whole app: API + mounted UI),
serving a tiny random DiffusionGemma: happy path, stored runs and CSVs, health, busy (503) and
responsiveness while sampling, and validation (every bad field is a 4xx naming the field)."""

from __future__ import annotations

import io
import json
import threading
import time

import httpx
import pandas as pd
import pytest

from petri.web.app import create_app
from petri.web.limits import MAX_SAMPLES
from petri.service import PetriService
from petri.store import RunStore
from petri.tables import pairs_table
from conftest import model_held

EVENT = "Only 90 units are in stock, but a customer ordered 120."
CONCEPTS = ["order", "inventory", "person"]


@pytest.fixture(scope="module")
def service(tiny_lm, tmp_path_factory):
    return PetriService(tiny_lm, RunStore(tmp_path_factory.mktemp("api-store")))


@pytest.fixture(scope="module")
def server(service, live_server):
    with live_server(create_app(service)) as live:
        yield live


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def seed_body(**changes) -> dict:
    body = {"concepts": CONCEPTS, "event": EVENT, "samples": 3, "settings": {"max_denoising_steps": 4}, "seed": 1}
    body.update(changes)
    return body


# --------------------------------------------------------------------------------- happy path


def test_health(client):
    r = client.get("/api/health")
    assert r.status_code == 200
    body = r.json()
    assert body["model_id"] == "tiny-random-seed0" and body["device"] == "cpu" and body["dtype"] == "float32"
    assert body["busy"] is False and body["canvas_length"] == 16
    assert "1-64" in body["limits"]["samples"]


def test_ui_and_docs_are_served(client):
    assert client.get("/").status_code == 200  # the Gradio UI, mounted at /
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/seed", "/api/health", "/api/runs/{run_id}", "/api/runs/{run_id}/{table}.csv"} <= set(paths)


def test_seed_stores_and_serves_csv(client, service):
    body = seed_body(
        event=None,
        events=[{"event": EVENT, "group": "contradictory"}, {"event": "The order was shipped on time.", "group": "benign"}],
        include_trajectories=True,
    )
    r = client.post("/api/seed", json=body)
    assert r.status_code == 200, r.text
    run = r.json()
    assert len(run["run_id"]) == 32 and run["status"] == "done"
    assert run["model"] == {"model_id": "tiny-random-seed0", "device": "cpu", "dtype": "float32",
                            "canvas_length": 16, "vocab_size": 384}
    assert run["settings"]["max_denoising_steps"] == 4 and run["timings"]["wall_s"] > 0
    assert [e["group"] for e in run["events"]] == ["contradictory", "benign"]
    event = run["events"][0]
    assert event["n_samples"] == 3 and len(event["samples"]) == 3
    for sample in event["samples"]:
        assert sorted(a["concept"] for a in sample["anchors"]) == sorted(CONCEPTS)
        assert len(sample["flips"]) == 16 and 1 <= sample["steps"] <= 4
        assert len(sample["argmax"]) == sample["steps"] and len(sample["argmax"][0]) == 16
        for a in sample["anchors"]:
            assert sample["flips"][a["start"]] == 0 and 0 <= a["agreement"] <= 1
    assert len(event["segments"]) == 3 * 2  # three anchors → two segments per sample
    assert {p["pair"] for p in event["pairs"]} <= {"inventory|order", "inventory|person", "order|person"}
    assert event["preservation"]["anchors"] == 9
    assert set(event["timings"]) >= {"encode_s", "denoise_s", "total_s"}

    # the stored run: every number recomputed from the stored trajectories
    stored = client.get(f"/api/runs/{run['run_id']}")
    assert stored.status_code == 200
    again = stored.json()
    assert again["events"][0]["pairs"] == event["pairs"]
    assert again["events"][1]["samples"][2]["flips"] == run["events"][1]["samples"][2]["flips"]
    assert again["events"][0]["samples"][0]["argmax"] is None  # only on request
    traj = service.store.load_events(run["run_id"])[0][2]
    expected = pairs_table(traj).set_index("pair")["instability"].to_dict()
    assert {p["pair"]: p["instability"] for p in event["pairs"]} == pytest.approx(expected, nan_ok=True)
    assert run["run_id"] in {r["run_id"] for r in client.get("/api/runs").json()}

    csv = client.get(run["csv"]["positions"])
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in csv.headers["content-disposition"]
    positions = pd.read_csv(io.StringIO(csv.text))
    assert len(positions) == 2 * 3 * 16
    assert set(positions["group"]) == {"contradictory", "benign"} and set(positions["event_index"]) == {0, 1}
    for table in ("segments", "samples", "pairs"):
        frame = pd.read_csv(io.StringIO(client.get(f"/api/runs/{run['run_id']}/{table}.csv").text))
        assert len(frame) and {"event", "group", "model_id"} <= set(frame.columns)


def test_settings_override_and_adaptive_stop(client):
    r = client.post("/api/seed", json=seed_body(samples=1, settings={"max_denoising_steps": 3, "adaptive_stop": False,
                                                                   "entropy_bound": 2.5, "pin_thought_channel": False}))
    assert r.status_code == 200, r.text
    settings = r.json()["settings"]
    assert settings["stability_threshold"] is None and settings["confidence_threshold"] is None
    assert settings["entropy_bound"] == 2.5 and r.json()["events"][0]["samples"][0]["steps"] == 3


# --------------------------------------------------------------------------------- busy


def test_busy_gets_503_and_server_stays_responsive(client, server, service):
    # a long job in flight: health and stored runs still answer; a second seed gets 503 + Retry-After
    long_body = seed_body(samples=32, settings={"max_denoising_steps": 96, "adaptive_stop": False})
    results = {}

    def long_request():
        with httpx.Client(base_url=server.url, timeout=120) as c:
            results["long"] = c.post("/api/seed", json=long_body)

    worker = threading.Thread(target=long_request)
    worker.start()
    deadline = time.monotonic() + 20
    while not service.busy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.busy, "the long job never started"
    started = time.monotonic()
    health = client.get("/api/health")
    assert health.status_code == 200 and health.json()["busy"] is True
    assert time.monotonic() - started < 2.0
    busy = client.post("/api/seed", json=seed_body())
    worker.join(120)
    assert results["long"].status_code == 200, results["long"].text
    if busy.status_code == 200:  # the long job finished first on a very fast machine
        pytest.skip("the long job finished before the second request")
    assert busy.status_code == 503
    assert busy.headers["retry-after"].isdigit() and "busy" in busy.json()["detail"]


def test_busy_while_another_caller_holds_the_model(client, service):
    with model_held(service):
        r = client.post("/api/seed", json=seed_body())
        assert r.status_code == 503 and "busy" in r.json()["detail"] and "Retry-After" in r.headers
        assert client.get("/api/runs").status_code == 200
    assert client.post("/api/seed", json=seed_body(samples=1)).status_code == 200


# --------------------------------------------------------------------------------- validation

LONG = "x" * 2001
CASES = {
    "one concept": (seed_body(concepts=["order"]), ["concepts"]),
    "nine concepts": (seed_body(concepts=[f"c{i}" for i in range(9)]), ["concepts"]),
    "control character": (seed_body(concepts=["order", "inv\u0007entory"]), ["concepts", 1]),
    "newline in concept": (seed_body(concepts=["order", "inv\nentory"]), ["concepts", 1]),
    "concept too long": (seed_body(concepts=["o" * 65, "person"]), ["concepts", 0]),
    "empty concept": (seed_body(concepts=["", "person"]), ["concepts", 0]),
    "padded concept": (seed_body(concepts=[" order", "person"]), ["concepts", 0]),
    "duplicate concept": (seed_body(concepts=["order", "Order"]), ["concepts", 1]),
    "concept not a string": (seed_body(concepts=["order", 7]), ["concepts", 1]),
    "too many samples": (seed_body(samples=MAX_SAMPLES + 1), ["samples"]),
    "zero samples": (seed_body(samples=0), ["samples"]),
    "event too long": (seed_body(event=LONG), ["event"]),
    "empty event": (seed_body(event=""), ["event"]),
    "no event": (seed_body(event=None), ["event"]),
    "event and events": (seed_body(events=[{"event": "a"}]), ["events"]),
    "too many events": (seed_body(event=None, events=[{"event": f"e{i}"} for i in range(25)]), ["events"]),
    "group too long": (seed_body(event=None, events=[{"event": "a", "group": "g" * 65}]), ["events", 0, "group"]),
    "event entry missing text": (seed_body(event=None, events=[{"group": "benign"}]), ["events", 0, "event"]),
    "group without event": (seed_body(event=None, group="benign", events=[{"event": "a"}]), ["group"]),
    "template too long": (seed_body(template=LONG), ["template"]),
    "template placeholder": (seed_body(template="Event: {evnt}"), ["template"]),
    "positions count": (seed_body(positions=[2, 8]), ["positions"]),
    "position outside canvas": (seed_body(positions=[2, 6, 99]), ["concepts", 2]),
    "overlapping positions": (seed_body(positions=[4, 4, 10]), ["concepts"]),
    "negative position": (seed_body(positions=[-1, 4, 10]), ["positions", 0]),
    "concepts overflow the canvas": (
        seed_body(concepts=["zyxwvutsrq", "qponmlkjih", "gfedcbazyx", "wvutsrqpon"]), ["concepts"]),
    "steps zero": (seed_body(settings={"max_denoising_steps": 0}), ["settings", "max_denoising_steps"]),
    "steps huge": (seed_body(settings={"max_denoising_steps": 100000}), ["settings", "max_denoising_steps"]),
    "negative temperature": (seed_body(settings={"t_min": -1}), ["settings", "t_min"]),
    "unknown setting": (seed_body(settings={"temperature": 1}), ["settings", "temperature"]),
    "unknown field": (seed_body(sample=3), ["sample"]),
    "negative seed": (seed_body(seed=-1), ["seed"]),
    "seed not a number": (seed_body(seed="abc"), ["seed"]),
    "include_trajectories not a bool": (seed_body(include_trajectories="maybe"), ["include_trajectories"]),
    "concepts not a list": (seed_body(concepts="order,person"), ["concepts"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_field_is_named(client, case):
    body, loc = CASES[case]
    body = {k: v for k, v in body.items() if v is not None}
    r = client.post("/api/seed", json=body)
    assert r.status_code == 422, (case, r.status_code, r.text)
    detail = r.json()["detail"]
    locs = [e["loc"][1 : 1 + len(loc)] for e in detail]
    assert loc in locs, (case, detail)
    assert all(e["msg"] for e in detail)


def test_trajectories_too_large_for_one_response(client, monkeypatch):
    import petri.web.limits

    monkeypatch.setattr(petri.web.limits, "MAX_TRAJECTORY_CELLS", 1000)  # 3 samples × 4 steps × 16 = 192 per event
    body = seed_body(event=None, events=[{"event": f"event {i}"} for i in range(6)], include_trajectories=True)
    r = client.post("/api/seed", json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "include_trajectories"]
    run_id = client.post("/api/seed", json={**body, "include_trajectories": False}).json()["run_id"]
    r = client.get(f"/api/runs/{run_id}", params={"include_trajectories": True})
    assert r.status_code == 422 and "include_trajectories" in r.text


def test_nan_and_malformed_json_are_422(client):
    r = client.post("/api/seed", content='{"concepts": ["order", "person"], "event": "x", "settings": {"t_max": NaN}}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "settings", "t_max"]
    r = client.post("/api/seed", content="{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    r = client.post("/api/seed", content=json.dumps([1, 2]), headers={"content-type": "application/json"})
    assert r.status_code == 422


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/..%2F..%2Fpetri.sqlite",
        "/api/runs/..%2Fx",
        "/api/runs/%2Fetc%2Fpasswd",
        "/api/runs/ZZZZZZZZZZ",
        "/api/runs/deadbeef%00",
        "/api/runs/" + "a" * 65,
        "/api/runs/0123456789abcdef",
        "/api/runs/..%2F..%2Fx/pairs.csv",
        "/api/runs/0123456789abcdef/pairs.csv",
    ],
)
def test_bad_run_ids_never_read_files(client, path):
    r = client.get(path)
    assert r.status_code in (404, 422), r.text
    assert "SQLite" not in r.text and "root:" not in r.text
    if "%2F" not in path:  # a decoded slash matches no API route at all (plain 404)
        assert "run_id" in r.text


def test_unknown_table_is_404(client):
    run_id = client.post("/api/seed", json=seed_body(samples=1)).json()["run_id"]
    for table in ("secrets", "..%2Fpetri", "positions.csv"):
        r = client.get(f"/api/runs/{run_id}/{table}.csv")
        assert r.status_code == 404, (table, r.text)
    assert "table" in client.get(f"/api/runs/{run_id}/secrets.csv").json()["detail"]
