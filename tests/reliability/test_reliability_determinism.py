"""Determinism: the same request with the same seed, on the same device (and the same torch thread
count), returns identical trajectories: the per-step raw argmax of every sample
(``include_trajectories: true``), and everything derived from it. Other requests in between do not
change that (each request seeds the sampler itself), the stored run returns the same arrays, and a
different seed gives different ones (so the comparison can fail)."""

from __future__ import annotations

import httpx
import pytest

from petri.app.service import PetriService
from petri.engine.torch.model import load_model
from petri.runs.store import RunStore
from petri.web.app import create_app
from reliability_support import EMBEDDED

EVENT = "Only 90 units are in stock, but a customer ordered 120."
REQUESTS = {
    "one event, adaptive stop": {"concepts": ["order", "inventory", "person"], "event": EVENT, "samples": 3,
                                 "settings": {"max_denoising_steps": 8}, "seed": 11},
    "events with groups, fixed steps": {
        "concepts": ["order", "person"], "events": [{"event": EVENT, "group": "contradictory"},
                                                    {"event": "The lamp was shipped on time.", "group": "benign"}],
        "samples": 4, "settings": {"max_denoising_steps": 6, "adaptive_stop": False, "t_min": 0.3, "t_max": 1.5},
        "seed": 2**32 - 1},
    "fixed positions, no shuffle": {"concepts": ["order", "stock"], "event": EVENT, "positions": [2, 9],
                                    "shuffle": False, "samples": 2, "settings": {"max_denoising_steps": 5}, "seed": 0},
}


def trajectories(run: dict) -> list:
    """Per event, per sample: (steps, anchors, raw argmax per step, flips, final text)."""
    return [
        [(s["steps"], [(a["concept"], a["start"], a["token_ids"]) for a in s["anchors"]], s["argmax"], s["flips"],
          s["final_text"]) for s in event["samples"]]
        for event in run["events"]
    ]


@pytest.fixture(scope="module")
def tiny_server(tiny_lm, tmp_path_factory, live_server):
    service = PetriService(tiny_lm, RunStore(tmp_path_factory.mktemp("determinism")))
    with live_server(create_app(service, ui=False)) as live:
        yield live


def post(url: str, body: dict) -> dict:
    r = httpx.post(url + "/api/seed", json={**body, "include_trajectories": True}, timeout=120)
    assert r.status_code == 200, r.text[:500]
    return r.json()


@pytest.mark.parametrize("name", list(REQUESTS))
def test_same_request_same_seed_same_trajectories(tiny_server, name):
    body = REQUESTS[name]
    first = post(tiny_server.url, body)
    post(tiny_server.url, {**body, "seed": body["seed"] ^ 0x5A5A})  # something else in between
    second = post(tiny_server.url, body)
    assert first["run_id"] != second["run_id"]
    assert trajectories(first) == trajectories(second)
    assert all(s["argmax"] and len(s["argmax"]) == s["steps"] for e in first["events"] for s in e["samples"])
    assert [e["pairs"] for e in first["events"]] == [e["pairs"] for e in second["events"]]

    # the stored run gives back the same arrays, and its tables equal the rerun's
    stored = httpx.get(f"{tiny_server.url}/api/runs/{first['run_id']}", params={"include_trajectories": True},
                       timeout=120).json()
    assert trajectories(stored) == trajectories(first)
    for table in ("positions", "segments"):
        a = httpx.get(f"{tiny_server.url}/api/runs/{first['run_id']}/{table}.csv", timeout=60).text
        b = httpx.get(f"{tiny_server.url}/api/runs/{second['run_id']}/{table}.csv", timeout=60).text
        assert a == b

    # a different seed changes the trajectories: the comparison above could have failed
    other = post(tiny_server.url, {**body, "seed": (body["seed"] + 1) % 2**32})
    assert [[s[2] for s in e] for e in trajectories(other)] != [[s[2] for s in e] for e in trajectories(first)]


def test_embedded_model_is_deterministic(tmp_path, live_server):
    lm = load_model(EMBEDDED, device="cpu")
    service = PetriService(lm, RunStore(tmp_path / "store"))
    body = {"concepts": ["order", "inventory", "person"], "event": EVENT, "samples": 2,
            "settings": {"max_denoising_steps": 6, "adaptive_stop": False}, "seed": 5}
    with live_server(create_app(service, ui=False)) as server:
        first = post(server.url, body)
        second = post(server.url, body)
    assert trajectories(first) == trajectories(second)
    assert first["model"]["model_id"] == "petri-tiny" and first["model"]["device"] == "cpu"
