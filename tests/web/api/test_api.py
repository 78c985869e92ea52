"""The HTTP API against a live uvicorn server on loopback (the whole app: API + mounted UI),
serving a tiny random DiffusionGemma: happy path, stored runs and CSVs, health, busy (503) and
responsiveness while sampling, and validation (every bad field is a 4xx naming the field)."""

from __future__ import annotations

import io
import json
import threading
import time
from contextlib import contextmanager

import httpx
import pandas as pd
import pytest

from petri.app.service import PetriService
from petri.runs.store import RunStore
from petri.web.app import create_app
from petri.web.limits import MAX_QUEUED, MAX_SAMPLES
from service_support import model_held

EVENT = "Only 90 units are in stock, but a customer ordered 120."
CONCEPTS = ["order", "inventory", "person"]


def seed_body(**changes) -> dict:
    body = {"concepts": CONCEPTS, "event": EVENT, "samples": 3, "settings": {"max_denoising_steps": 4}, "seed": 1}
    body.update(changes)
    return body


# --------------------------------------------------------------------------------- references


def reference_flips(samples: list[dict]) -> list[list[int]]:
    """Flips per position of each returned sample, by plain loops over its ``argmax`` (steps × L):
    a change between consecutive steps counts 1; anchor positions count 0."""
    out = []
    for sample in samples:
        history = sample["argmax"]
        pinned = {i for a in sample["anchors"] for i in range(a["start"], a["end"])}
        flips = [0] * len(history[0])
        for t in range(1, len(history)):
            for i in range(len(flips)):
                if history[t][i] != history[t - 1][i] and i not in pinned:
                    flips[i] += 1
        out.append(flips)
    return out


def reference_segments_and_pairs(samples: list[dict]):
    """Segments ``(sample, left, right, start, end, instability)`` between neighbouring anchors (in
    canvas order; instability = mean flips over the gap, NaN when empty) and, per sorted pair
    ``"a|b"``, ``(non-empty segments, their mean)``."""
    segments, values = [], {}
    for sample, flips in zip(samples, reference_flips(samples)):
        ordered = sorted(sample["anchors"], key=lambda a: a["start"])
        for a, b in zip(ordered, ordered[1:]):
            gap = flips[a["end"]:b["start"]]
            value = sum(gap) / len(gap) if gap else float("nan")
            segments.append((sample["sample"], a["concept"], b["concept"], a["end"], b["start"], value))
            bucket = values.setdefault("|".join(sorted((a["concept"], b["concept"]))), [])
            if gap:
                bucket.append(value)
    pairs = {p: (len(v), sum(v) / len(v) if v else float("nan")) for p, v in values.items()}
    return segments, pairs


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
    assert {"/api/seed", "/api/health", "/api/runs/{run_id}", "/api/runs/{run_id}/{table}.{fmt}"} <= set(paths)


def test_seed_stores_and_serves_csv(client, served):
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
        assert len(sample["canvas"]) == sample["steps"] and len(sample["canvas"][0]) == 16
        for a in sample["anchors"]:
            assert sample["flips"][a["start"]] == 0 and 0 <= a["agreement"] <= 1
            for row in sample["canvas"]:  # an anchor's own tokens on the canvas at every step
                assert row[a["start"]: a["start"] + len(a["token_ids"])] == a["token_ids"]
    assert len(event["segments"]) == 3 * 2  # three anchors → two segments per sample
    # flips, segments and pairs against a plain-loop reference over the returned argmax history
    expected_segments, expected_pairs = reference_segments_and_pairs(event["samples"])
    for sample, flips in zip(event["samples"], reference_flips(event["samples"])):
        assert sample["flips"] == flips
    nan = float("nan")
    assert [(g["sample"], g["left"], g["right"], g["start"], g["end"]) for g in event["segments"]] == [e[:5] for e in expected_segments]
    assert [nan if g["instability"] is None else g["instability"] for g in event["segments"]] == pytest.approx(
        [e[5] for e in expected_segments], nan_ok=True)
    assert sorted(p["pair"] for p in event["pairs"]) == sorted(expected_pairs)
    for p in event["pairs"]:
        n_segments, instability = expected_pairs[p["pair"]]
        assert p["n_segments"] == n_segments, p
        assert (nan if p["instability"] is None else p["instability"]) == pytest.approx(instability, nan_ok=True), p
    assert event["preservation"]["anchors"] == 9
    assert set(event["timings"]) >= {"encode_s", "denoise_s", "total_s"}

    # the stored run: every number recomputed from the stored trajectories
    stored = client.get(f"/api/runs/{run['run_id']}")
    assert stored.status_code == 200
    again = stored.json()
    assert again["events"][0]["pairs"] == event["pairs"]
    assert again["events"][1]["samples"][2]["flips"] == run["events"][1]["samples"][2]["flips"]
    assert again["events"][0]["samples"][0]["argmax"] is None  # only on request
    stored_event = client.get(f"/api/runs/{run['run_id']}", params={"include_trajectories": True}).json()["events"][0]
    assert [s["argmax"] for s in stored_event["samples"]] == [s["argmax"] for s in event["samples"]]
    assert [s["canvas"] for s in stored_event["samples"]] == [s["canvas"] for s in event["samples"]]
    assert run["run_id"] in {r["run_id"] for r in client.get("/api/runs").json()}

    csv = client.get(run["csv"]["positions"])
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in csv.headers["content-disposition"]
    positions = pd.read_csv(io.StringIO(csv.text))
    assert len(positions) == 2 * 3 * 16
    assert set(positions["group"]) == {"contradictory", "benign"} and set(positions["event_index"]) == {0, 1}
    for table in ("segments", "samples", "pairs"):
        frame = pd.read_csv(io.StringIO(client.get(f"/api/runs/{run['run_id']}/{table}.csv").text))
        assert len(frame) and {"event_index", "group", "model_id"} <= set(frame.columns)
        assert ("event" in frame.columns) is (table != "segments")  # per-segment rows carry no texts


def test_settings_override_and_adaptive_stop(client):
    r = client.post("/api/seed", json=seed_body(samples=1, settings={"max_denoising_steps": 3, "adaptive_stop": False,
                                                                   "entropy_bound": 2.5, "pin_thought_channel": False}))
    assert r.status_code == 200, r.text
    settings = r.json()["settings"]
    assert settings["stability_threshold"] is None and settings["confidence_threshold"] is None
    assert settings["entropy_bound"] == 2.5 and r.json()["events"][0]["samples"][0]["steps"] == 3


# --------------------------------------------------------------------------------- busy


@contextmanager
def api_job_held(served, monkeypatch):
    """While the block runs, the first model job that takes ``served``'s lock keeps it (gated)
    until the block ends; yields an event set once that job holds the lock."""
    holding, release = threading.Event(), threading.Event()
    original = served.exclusive

    @contextmanager
    def gated(wait_s=None, cancel=None):
        with original(wait_s, cancel):
            if not holding.is_set():
                holding.set()
                assert release.wait(60), "the test never released the job"
            yield

    monkeypatch.setattr(served, "exclusive", gated)
    try:
        yield holding
    finally:
        release.set()


def test_busy_gets_503_and_server_stays_responsive(client, server, served, monkeypatch):
    # a job of this API holds the model (sampling in a worker thread): health and stored runs
    # answer while it holds it, and a second seed gets 503 + Retry-After at once
    results = {}

    def long_request():
        with httpx.Client(base_url=server.url, timeout=120) as c:
            results["long"] = c.post("/api/seed", json=seed_body(samples=2))

    with api_job_held(served, monkeypatch) as holding:
        worker = threading.Thread(target=long_request)
        worker.start()
        assert holding.wait(30), "the first job never took the model"
        health = client.get("/api/health")
        assert health.status_code == 200 and health.json()["busy"] is True
        assert client.get("/api/runs").status_code == 200
        busy = client.post("/api/seed", json=seed_body())
        assert busy.status_code == 503, busy.text
        assert busy.headers["retry-after"].isdigit() and "busy" in busy.json()["detail"]
        assert "long" not in results  # the first job is still held: the 503 came while it ran
    worker.join(120)
    assert results["long"].status_code == 200, results["long"].text
    assert client.get("/api/health").json()["busy"] is False


class CountingService(PetriService):
    """A service that counts the API model jobs that reached its lock (API jobs pass the server's
    ``busy_wait_s``; :func:`conftest.model_held` passes nothing and is not counted)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reached = 0
        self._count = threading.Lock()

    @contextmanager
    def exclusive(self, wait_s=None, cancel=None):
        if wait_s:
            with self._count:
                self.reached += 1
        with super().exclusive(wait_s, cancel):
            yield


@pytest.mark.parametrize("holder", ["another caller", "an API job"])
def test_at_most_max_queued_requests_wait_and_health_answers(tiny_lm, tmp_path, live_server, monkeypatch, holder):
    """With ``busy_wait_s`` > 0 at most ``MAX_QUEUED + 1`` API jobs are in flight (running or
    waiting for the lock): one running and ``MAX_QUEUED`` waiting while an API job holds the model,
    ``MAX_QUEUED + 1`` waiting while another caller (the UI) holds it. Every further request is
    refused with 503 at once, and health answers while all of them wait."""
    extra = 3
    service = CountingService(tiny_lm, RunStore(tmp_path))
    responses: dict[int, httpx.Response] = {}

    def post(i: int) -> None:
        with httpx.Client(base_url=live.url, timeout=120) as c:
            responses[i] = c.post("/api/seed", json=seed_body(samples=1, seed=i, settings={"max_denoising_steps": 2}))

    def refused() -> int:
        return sum(r.status_code == 503 for r in list(responses.values()))

    def settle(total: int) -> None:
        """Poll (deadline 60 s) until every one of ``total`` requests reached the lock or was refused."""
        deadline = time.monotonic() + 60
        while service.reached + refused() < total and time.monotonic() < deadline:
            time.sleep(0.01)

    with live_server(create_app(service, ui=False, busy_wait_s=60)) as live, httpx.Client(base_url=live.url, timeout=60) as c:
        if holder == "an API job":
            hold = api_job_held(service, monkeypatch)
            holding = hold.__enter__()
            first = threading.Thread(target=post, args=(1000,))
            first.start()
            assert holding.wait(30), "the first job never took the model"
            n_requests = MAX_QUEUED + extra  # the first one runs: MAX_QUEUED more may wait
        else:
            hold = model_held(service)
            hold.__enter__()
            first = None
            n_requests = MAX_QUEUED + 1 + extra
        try:
            threads = [threading.Thread(target=post, args=(i,)) for i in range(n_requests)]
            for t in threads:
                t.start()
            in_flight = n_requests + (first is not None)
            settle(in_flight)
            assert refused() == extra, sorted((i, r.status_code) for i, r in responses.items())
            assert service.reached == in_flight - extra == MAX_QUEUED + 1
            assert len(responses) == extra  # nothing else has answered: the admitted ones wait
            health = c.get("/api/health")  # answered on the event loop while every job waits
            assert health.status_code == 200 and health.json()["busy"] is True
            for r in responses.values():
                assert r.headers["retry-after"].isdigit() and "busy" in r.json()["detail"]
        finally:
            hold.__exit__(None, None, None)
        for t in threads + ([first] if first else []):
            t.join(120)
        codes = sorted(r.status_code for r in responses.values())
        assert codes == [200] * (MAX_QUEUED + 1) + [503] * extra
        assert c.get("/api/health").json()["busy"] is False


def test_busy_while_another_caller_holds_the_model(client, served):
    with model_held(served):
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
