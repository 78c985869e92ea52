"""The HTTP API on ZeroGPU (petri/web/zerogpu_routes.py, petri/web/ui/api_endpoints.py), under the
fork harness (tests/zerogpu_support.py), on the CPU with the tiny model: the GPU routes answer 501
naming the Gradio endpoint; ``gradio_client`` calls that endpoint with the route's own JSON body and
gets the route's own answer (and a frame per step); the CPU routes stay on FastAPI; off ZeroGPU
nothing changes."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from gradio_client import Client

import zerogpu_support as harness
from petri.web.access import CALLER_HEADER, AccessPolicy, owner_of
from petri.web.app import create_app
from petri.web.ui.build import build_ui
from petri.web.zerogpu_routes import GPU_ROUTES, zerogpu_answer

BODY = {"events": [{"event": "Only 90 units are in stock.", "group": "a"}, {"event": "120 were ordered."}],
        "concepts": ["order", "inventory"], "template": "{event}", "samples": 2, "seed": 3,
        "settings": {"max_denoising_steps": 4, "adaptive_stop": False}}
#: What differs between two runs of the same seed: their ids, clocks and links.
PER_RUN = ("run_id", "timings", "csv", "created_at", "finished_at", "token")


def same_work(answer: dict) -> dict:
    """``answer`` without what differs between two runs of the same seed (ids, clocks, links)."""
    kept = {k: v for k, v in answer.items() if k not in PER_RUN}
    kept["events"] = [{k: v for k, v in event.items() if k != "timings"} for event in answer["events"]]
    return kept


def test_every_post_route_of_the_api_is_classified(service):
    """A new POST route must say whether it runs the model (GPU_ROUTES) before this passes: the
    API's POST routes are exactly the GPU routes (run listing and exports are GETs)."""
    app = create_app(service, ui=False)
    posts = {path for path, operations in app.openapi()["paths"].items() if "post" in operations}
    assert posts == set(GPU_ROUTES)


def test_on_zerogpu_the_gpu_routes_answer_501_and_the_gradio_endpoint_answers_as_the_route(
        service, monkeypatch, live_server):
    with TestClient(create_app(service, ui=False)) as api:  # the dedicated path, for the same seed
        dedicated = api.post("/api/seed", json=BODY)
    assert dedicated.status_code == 200, dedicated.text
    runs_before = {r["run_id"] for r in service.store.list_runs()}
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setenv("SPACE_ID", "someone/petri-zero")
    with live_server(create_app(service, access=AccessPolicy(public=True))) as live:  # a Space is public
        with httpx.Client(base_url=live.url, timeout=60) as http:
            refused = {path: http.post(path, json=BODY) for path in GPU_ROUTES}
            assert harness.CALLS == [] and {r["run_id"] for r in service.store.list_runs()} == runs_before
            frames = list(Client(live.url, verbose=False).submit(BODY, api_name="/seed"))
            answer = frames[-1]
            mine = {CALLER_HEADER: answer["token"]}
            health = http.get("/api/health")
            listed = http.get("/api/runs", headers=mine)
            stored = http.get(f"/api/runs/{answer['run_id']}", headers=mine)
            table = http.get(f"/api/runs/{answer['run_id']}/samples.csv", headers=mine)
            others = http.get(f"/api/runs/{answer['run_id']}")

    for path, response in refused.items():
        assert response.status_code == 501, (path, response.text)
        assert response.json() == zerogpu_answer(path)
    seed_refusal = refused["/api/seed"].json()
    assert seed_refusal["gradio_endpoint"] == "/seed" and "api_name='/seed'" in seed_refusal["gradio_client"]
    assert "Client('someone/petri-zero')" in seed_refusal["gradio_client"]
    assert refused["/api/study"].json()["gradio_endpoint"] == "/study"
    assert refused["/api/probe"].json()["gradio_endpoint"] == "/probe"

    assert answer["kind"] == "seed" and same_work(answer) == same_work(dedicated.json())
    steps = frames[:-1]
    assert [f["kind"] for f in steps] == ["step"] * 8  # 2 events × 4 steps, then the answer
    assert [f["step"] for f in steps] == [0, 1, 2, 3] * 2 and {f["run_id"] for f in steps} == {answer["run_id"]}
    (_, _, first), (_, _, second) = service.store.load_events(answer["run_id"])
    streamed = np.array([f["argmax"] for f in steps])  # (8, samples, canvas)
    np.testing.assert_array_equal(streamed[:4], first.argmax.transpose(1, 0, 2))
    np.testing.assert_array_equal(streamed[4:], second.argmax.transpose(1, 0, 2))
    (call,) = harness.CALLS  # the whole seed was one GPU call, in a forked child
    assert call.exitcode == 0 and call.yields == 8 + 2
    assert service.store.owns_run(answer["run_id"], owner_of(answer["token"]))

    assert health.status_code == listed.status_code == stored.status_code == table.status_code == 200
    assert [r["run_id"] for r in listed.json()] == [answer["run_id"]]  # this caller's runs only
    assert [e["samples"] for e in stored.json()["events"]] == [e["samples"] for e in answer["events"]]
    assert len(table.text.strip().splitlines()) == 1 + 2 * 2 and "Only 90 units" in table.text  # a row a sample
    assert others.status_code in (401, 404)  # a public Space: the run is its submitter's


def test_a_bad_body_is_refused_by_the_gradio_endpoint_naming_the_field(service, monkeypatch):
    harness.serve_on_zerogpu(monkeypatch, service)
    from petri.web.ui.access import UiAccess
    from petri.web.ui.api_endpoints import seed_endpoint

    seed = seed_endpoint(service, UiAccess())
    import gradio as gr

    with pytest.raises(gr.Error, match="samples") as err:
        list(seed({**BODY, "samples": 0}, None))
    assert err.value.title == "Bad request"
    with pytest.raises(gr.Error, match="colour"):  # an unknown field, refused as the route refuses it
        list(seed({**BODY, "colour": "red"}, None))
    assert harness.CALLS == [] and service.store.list_runs() == []  # no GPU call, nothing stored


def test_off_zerogpu_the_routes_run_and_no_gradio_endpoint_is_added(service, monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    with TestClient(create_app(service, ui=False)) as api:
        queued = api.post("/api/jobs/seed", json=BODY)
    assert queued.status_code == 202, queued.text
    names = {fn.api_name for fn in build_ui(service).fns.values()}
    assert "seed" not in names
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert "seed" in {fn.api_name for fn in build_ui(service).fns.values()}


def test_the_gradio_study_endpoint_answers_as_the_route_one_gpu_call_a_batch(tiny_lm, tmp_path, monkeypatch,
                                                                             live_server):
    from petri.app.service import PetriService
    from petri.runs.store import RunStore
    from study_support import study_dict

    body = {"study": study_dict("zerogpu-study", "ZeroGPU study", templates=1), "samples": 2, "seed": 5,
            "settings": {"max_denoising_steps": 4}}
    dedicated_service = PetriService(tiny_lm, RunStore(tmp_path / "dedicated"))
    with TestClient(create_app(dedicated_service, ui=False)) as api:
        dedicated = api.post("/api/study", json=body)
        dedicated_table = api.get(f"/api/runs/{dedicated.json()['run_id']}/samples.csv")
    dedicated_service.shutdown()
    assert dedicated.status_code == 200, dedicated.text
    service = PetriService(tiny_lm, RunStore(tmp_path / "zero"))
    harness.serve_on_zerogpu(monkeypatch, service)
    try:
        with live_server(create_app(service)) as live:
            frames = list(Client(live.url, verbose=False).submit(body, api_name="/study"))
            table = httpx.get(f"{live.url}/api/runs/{frames[-1]['run_id']}/samples.csv", timeout=60)
    finally:
        service.shutdown()
    answer, batches = frames[-1], frames[:-1]
    expected = dedicated.json()
    assert answer["kind"] == "study" and answer["computed"] == answer["batches"] == expected["batches"] > 1
    assert {k: v for k, v in answer.items() if k != "timings"} == {k: v for k, v in expected.items() if k != "timings"}
    assert [f["kind"] for f in batches] == ["batch"] * answer["batches"]
    assert [f["done"] for f in batches] == list(range(1, answer["batches"] + 1))
    assert len(harness.CALLS) == answer["batches"] and {c.exitcode for c in harness.CALLS} == {0}  # a fork a batch
    assert table.status_code == 200 and table.text == dedicated_table.text


READ_BODY = {"prompt": "Only 90 units are in stock, but a customer ordered 120.", "frame": "ok: {{consistent}}",
             "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}], "samples": 2, "steps": 2, "seed": 3,
             "order": "cyclic"}


def test_the_gradio_probe_endpoint_reads_in_one_gpu_call_and_answers_as_the_route(service, monkeypatch, live_server):
    with TestClient(create_app(service, ui=False)) as api:  # the dedicated path, for the same read
        dedicated = api.post("/api/probe", json=READ_BODY)
    assert dedicated.status_code == 200, dedicated.text
    harness.serve_on_zerogpu(monkeypatch, service)
    with live_server(create_app(service)) as live:
        (answer,) = list(Client(live.url, verbose=False).submit(READ_BODY, api_name="/probe"))
        refused = httpx.post(f"{live.url}/api/probe", json=READ_BODY, timeout=60)
    assert refused.status_code == 501 and refused.json()["gradio_endpoint"] == "/probe"
    (call,) = harness.CALLS  # the read was one GPU call, in a forked child
    assert call.exitcode == 0 and call.yields == 1
    here, there = dedicated.json(), answer
    assert there["kind"] == here["kind"] == "probe" and there["run_id"] != here["run_id"]
    assert there["read"]["request"] == here["read"]["request"]
    for a, b in zip(there["read"]["reads"], here["read"]["reads"], strict=True):
        assert (a["question"], a["step"], a["answer"]) == (b["question"], b["step"], b["answer"])
        np.testing.assert_allclose(a["probs"], b["probs"], rtol=1e-6)
    assert service.get_run(there["run_id"])["status"] == "done"


def test_the_gradio_probe_endpoint_refuses_a_labelled_set_and_a_bad_field_before_any_call(service, monkeypatch):
    import gradio as gr

    from petri.web.ui.access import UiAccess
    from petri.web.ui.api_endpoints import probe_endpoint

    harness.serve_on_zerogpu(monkeypatch, service)
    probe = probe_endpoint(service, UiAccess())
    with pytest.raises(gr.Error, match="set.*does not run on ZeroGPU"):
        list(probe({"set": "consistency-small"}, None))
    with pytest.raises(gr.Error, match="steps"):
        list(probe({**READ_BODY, "steps": 0}, None))
    with pytest.raises(gr.Error, match="questions"):  # refused by the plan on the model (an unknown slot)
        list(probe({**READ_BODY, "frame": "ok: {{other}}"}, None))
    assert harness.CALLS == [] and service.store.list_runs() == []
