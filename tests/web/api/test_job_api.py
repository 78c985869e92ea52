"""The job API over HTTP (a live loopback server, a tiny random model): submit → poll → done equal to
the synchronous route; the event stream; cancel (queued and running); a full queue; the synchronous
budget; a client that leaves; and, on a public server, who may see and cancel what."""

from __future__ import annotations

import json
import socket

import httpx
import numpy as np
import pytest

from petri.app.service import PetriService
from petri.runs.store import RunStore
from petri.web import limits
from petri.web.access import AccessPolicy
from petri.web.app import create_app
from service_support import model_held
from tests.app.test_jobs import DEADLINE_S, STUDY, wait_until

EVENT = "Only 90 units are in stock, but a customer ordered 120."


def seed_body(**changes) -> dict:
    body = {"concepts": ["order", "inventory", "person"], "event": EVENT, "samples": 3,
            "settings": {"max_denoising_steps": 4}, "seed": 1}
    body.update(changes)
    return body


def study_body(**changes) -> dict:
    body = {"study": STUDY, "samples": 2, "seed": 5, "settings": {"max_denoising_steps": 6}}
    body.update(changes)
    return body


#: the module's served service (tests/web/conftest.py): a queue of 2, the API alone
SERVICE_OPTIONS = {"max_queued_jobs": 2}
SERVE_UI = False


def poll_final(client, job_id: str, headers=None) -> dict:
    state: dict = {}

    def final():
        nonlocal state
        state = client.get(f"/api/jobs/{job_id}", headers=headers).json()
        return state["status"] in ("done", "failed", "cancelled", "interrupted")

    wait_until(final, f"job {job_id} to finish")
    return state


def read_events(client, url: str, headers=None) -> list[tuple[str, dict]]:
    """The whole server-sent-event stream of a job, as (event, data) pairs."""
    events = []
    with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    return events


def test_submit_poll_done_equals_the_synchronous_seed(client, served):
    submitted = client.post("/api/jobs/seed", json=seed_body(samples=4))
    assert submitted.status_code == 202, submitted.text
    body = submitted.json()
    assert len(body["job_id"]) == 32 and body["status_url"] == f"/api/jobs/{body['job_id']}"
    assert body["events_url"] == f"/api/jobs/{body['job_id']}/events" and body["token"] is None
    state = poll_final(client, body["job_id"])
    assert state["status"] == "done" and state["kind"] == "seed" and state["progress"]["unit"] == "step"
    assert state["started"] >= state["created"] and state["finished"] >= state["started"]
    sync = client.post("/api/seed", json=seed_body(samples=4)).json()
    (_, _, via_job), = served.store.load_events(state["run_id"])
    (_, _, direct), = served.store.load_events(sync["run_id"])
    for field in ("argmax", "entropy", "accepted", "steps", "final_ids", "anchor_mask"):
        np.testing.assert_array_equal(getattr(via_job, field), getattr(direct, field), err_msg=field)
    listed = client.get("/api/jobs", params={"limit": 5}).json()
    assert listed["jobs"][0]["job_id"] == body["job_id"] and listed["limit"] == 5


def test_the_event_stream_is_ordered_ends_with_the_final_state_and_starts_late_subscribers_from_now(client, served):
    import threading

    got: list = []
    with httpx.Client(base_url=str(client.base_url), timeout=60) as watcher:
        with model_held(served):  # the job waits in the queue while the stream opens
            job = client.post("/api/jobs/study", json=study_body()).json()
            reader = threading.Thread(target=lambda: got.extend(read_events(watcher, job["events_url"])))
            reader.start()
            wait_until(lambda: len(served.jobs._subscribers.get(job["job_id"], [])) == 1, "the stream to subscribe")
        reader.join(DEADLINE_S)
    names = [n for n, _ in got]
    assert names[0] == "state" and got[0][1]["status"] == "queued"
    assert names[-1] == "end" and got[-1][1]["status"] == "done" and names.count("end") == 1
    assert names.index("status") < names.index("progress")
    batches = [d["progress"]["done"] for n, d in got if n == "progress" and d["progress"]["unit"] == "batch"]
    assert batches == sorted(batches) and batches[-1] == 4
    late = read_events(client, job["events_url"])
    assert [n for n, _ in late] == ["state", "end"] and late[0][1]["progress"]["done"] == 4


def test_cancel_a_queued_job_and_a_running_one(client, served):
    with model_held(served):
        blocker = client.post("/api/jobs/seed", json=seed_body()).json()
        wait_until(lambda: served.jobs.current is not None, "the worker to take the first job")
        queued = client.post("/api/jobs/study", json=study_body(seed=77)).json()
        answer = client.delete(f"/api/jobs/{queued['job_id']}")
        assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
        assert client.delete(f"/api/jobs/{queued['job_id']}").json()["status"] == "cancelled"  # idempotent
        client.delete(f"/api/jobs/{blocker['job_id']}")
    assert poll_final(client, blocker["job_id"])["status"] == "cancelled"
    state = client.get(f"/api/jobs/{queued['job_id']}").json()
    assert state["started"] is None and state["run_id"] is None  # it never started

    # batches slow enough (200 steps, no adaptive stop) that the cancel lands before the last one ends, even
    # on a loaded machine: with 6-step batches the study could finish between the poll and the DELETE
    slow = {"max_denoising_steps": 200, "adaptive_stop": False}
    running = client.post("/api/jobs/study", json=study_body(seed=78, samples=8, settings=slow)).json()
    wait_until(lambda: client.get(f"/api/jobs/{running['job_id']}").json()["progress"]["done"] >= 1, "a stored batch")
    client.delete(f"/api/jobs/{running['job_id']}")
    final = poll_final(client, running["job_id"])
    assert final["status"] == "cancelled"
    kept = served.store.completed_events(final["run_id"])
    assert 1 <= len(kept) < 4
    assert client.get(f"/api/runs/{final['run_id']}").json()["status"] == "cancelled"
    assert client.delete("/api/jobs/" + "0" * 32).status_code == 404


def test_a_full_queue_is_503_with_retry_after(client, served):
    assert served.jobs.max_queued == SERVICE_OPTIONS["max_queued_jobs"]  # the module's options reached its service
    with model_held(served):
        first = client.post("/api/jobs/seed", json=seed_body()).json()
        wait_until(lambda: served.jobs.current is not None, "the worker to take the first job")
        waiting = [client.post("/api/jobs/seed", json=seed_body()) for _ in range(served.jobs.max_queued)]
        assert [r.status_code for r in waiting] == [202] * served.jobs.max_queued
        full = client.post("/api/jobs/seed", json=seed_body())
        assert full.status_code == 503 and full.headers["retry-after"] == str(limits.RETRY_AFTER_S)
        assert "queue is full" in full.json()["detail"]
        health = client.get("/api/health").json()["queue"]
        assert health == {"running": first["job_id"], "queued": served.jobs.max_queued,
                          "max_queued": served.jobs.max_queued, "sync_max_token_steps": limits.SYNC_MAX_TOKEN_STEPS}
    for r in [first, *(w.json() for w in waiting)]:
        assert poll_final(client, r["job_id"])["status"] == "done"


TWO_EVENTS = [{"event": EVENT}, {"event": "The order was shipped on time."}]
#: The most steps two events of 64 samples on the 16-token canvas may take synchronously.
STEPS_IN_BUDGET = limits.SYNC_MAX_TOKEN_STEPS // (2 * 64 * 16)


def test_a_synchronous_seed_over_the_budget_is_refused_naming_it(client):
    """Refused before any sampling, naming the budget; the same body is accepted as a job (cancelled
    at once here: running it is not what this test checks). Under a second."""
    steps = STEPS_IN_BUDGET + 1
    over = seed_body(event=None, events=TWO_EVENTS, samples=64, settings={"max_denoising_steps": steps})
    answer = client.post("/api/seed", json=over)
    assert answer.status_code == 422
    (detail,) = answer.json()["detail"]
    assert detail["type"] == "sync_budget_exceeded" and detail["loc"] == ["body", "samples"]
    assert detail["budget"] == limits.SYNC_MAX_TOKEN_STEPS and detail["work"] == 2 * 64 * steps * 16
    assert "POST /api/jobs/seed" in detail["msg"]
    as_job = client.post("/api/jobs/seed", json=over)  # the same body is a fine job
    assert as_job.status_code == 202
    assert client.delete(f"/api/jobs/{as_job.json()['job_id']}").status_code == 200
    assert poll_final(client, as_job.json()["job_id"])["status"] == "cancelled"


def test_the_synchronous_budget_is_inclusive():
    """events x samples x steps x canvas equal to the budget passes; one step more is refused."""
    from petri.web.api.routes import check_sync_budget
    from petri.web.errors import FieldError

    check_sync_budget(2, 64, STEPS_IN_BUDGET, 16)  # 2 * 64 * STEPS_IN_BUDGET * 16 <= the budget
    assert 2 * 64 * STEPS_IN_BUDGET * 16 <= limits.SYNC_MAX_TOKEN_STEPS < 2 * 64 * (STEPS_IN_BUDGET + 1) * 16
    with pytest.raises(FieldError):
        check_sync_budget(2, 64, STEPS_IN_BUDGET + 1, 16)
    check_sync_budget(1, 1, limits.SYNC_MAX_TOKEN_STEPS, 1)
    with pytest.raises(FieldError):
        check_sync_budget(1, 1, limits.SYNC_MAX_TOKEN_STEPS + 1, 1)


@pytest.mark.parametrize("change,loc", [
    ({"template": "Describe {concepts}."}, ["body", "template"]),
    ({"samples": True}, ["body", "samples"]),
    ({"seed": "3"}, ["body", "seed"]),
])
def test_the_two_validation_gaps_are_closed(client, change, loc):
    for route in ("/api/seed", "/api/jobs/seed"):
        answer = client.post(route, json=seed_body(**change))
        assert answer.status_code == 422, (route, answer.text)
        assert [d["loc"] for d in answer.json()["detail"]] == [loc]


def test_a_client_that_leaves_a_synchronous_seed_frees_the_model(server, served):
    """Raw HTTP: send a long synchronous seed, close the socket once the model is busy; the run is
    cancelled at its next step and the model is free again."""
    settings = {"max_denoising_steps": STEPS_IN_BUDGET, "adaptive_stop": False}
    body = json.dumps(seed_body(samples=64, settings=settings, event=None, events=TWO_EVENTS)).encode()
    host, port = server.url.removeprefix("http://").split(":")
    before = {r["run_id"] for r in served.store.list_runs(200)}
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /api/seed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    wait_until(lambda: served.busy, "the seed to start")
    sock.close()
    wait_until(lambda: not served.busy, "the model to be free again", timeout=10)
    (new,) = [r for r in served.store.list_runs(200) if r["run_id"] not in before]
    assert new["status"] == "cancelled" and new["events_stored"] == 0


# ------------------------------------------------------------------------------ access
@pytest.fixture(scope="module")
def public_server(tiny_lm, tmp_path_factory, live_server):
    svc = PetriService(tiny_lm, RunStore(tmp_path_factory.mktemp("public")))
    with live_server(create_app(svc, ui=False, access=AccessPolicy(public=True))) as live:
        yield live, svc
    svc.shutdown()


def test_on_a_public_server_a_second_client_sees_and_cancels_nothing_of_the_first(public_server):
    live, service = public_server
    with httpx.Client(base_url=live.url, timeout=60) as http:
        with model_held(service):  # keep A's second job queued so a cancel would matter
            a_done = http.post("/api/jobs/seed", json=seed_body()).json()
            token = a_done["token"]
            assert token and len(token) >= 24
            a = {"X-Petri-Token": token}
            a_queued = http.post("/api/jobs/seed", json=seed_body(seed=2), headers=a).json()
            assert a_queued["token"] == token
            b_token = http.post("/api/jobs/seed", json=seed_body(seed=3)).json()["token"]
            b = {"X-Petri-Token": b_token}
            assert b_token != token

            assert {j["job_id"] for j in http.get("/api/jobs", headers=b).json()["jobs"]} <= {
                j["job_id"] for j in http.get("/api/jobs", headers=b).json()["jobs"]}
            b_sees = {j["job_id"] for j in http.get("/api/jobs", headers=b).json()["jobs"]}
            assert a_done["job_id"] not in b_sees and a_queued["job_id"] not in b_sees and len(b_sees) == 1
            assert http.get("/api/jobs").status_code == 401  # no token: no list (the README says so)
            assert http.get("/api/runs").status_code == 401
            assert http.get(f"/api/jobs/{a_queued['job_id']}", headers=b).status_code == 404
            assert http.get(f"/api/jobs/{a_queued['job_id']}").status_code == 401
            assert http.delete(f"/api/jobs/{a_queued['job_id']}", headers=b).status_code == 404
            assert http.delete(f"/api/jobs/{a_queued['job_id']}").status_code == 401
            assert http.get(f"/api/jobs/{a_queued['job_id']}/events", headers=b).status_code == 404
            assert service.jobs.get(a_queued["job_id"]).status == "queued"  # untouched
        a_state = poll_final(http, a_done["job_id"], headers=a)
        assert poll_final(http, a_queued["job_id"], headers=a)["status"] == "done"
        run = a_state["run_id"]
        assert http.get(f"/api/runs/{run}", headers=a).status_code == 200
        assert http.get(f"/api/runs/{run}", headers=b).status_code == 404
        assert http.get(f"/api/runs/{run}/pairs.csv", headers=b).status_code == 404
        assert http.get(f"/api/runs/{run}").status_code == 404
        assert run not in {r["run_id"] for r in http.get("/api/runs", headers=b).json()}
        assert run in {r["run_id"] for r in http.get("/api/runs", headers=a).json()}
        sync = http.post("/api/seed", json=seed_body(seed=4), headers=b)
        assert sync.status_code == 200 and sync.headers["x-petri-token"] == b_token
        assert http.get(f"/api/runs/{sync.json()['run_id']}", headers=a).status_code == 404
        assert http.get("/api/health").json()["public"] is True


def test_an_api_token_guards_every_route_but_health(tiny_lm, tmp_path, live_server):
    svc = PetriService(tiny_lm, RunStore(tmp_path / "guarded"))
    with live_server(create_app(svc, access=AccessPolicy(api_token="s3cret-token"))) as live, \
            httpx.Client(base_url=live.url, timeout=60) as http:
        assert http.get("/api/health").status_code == 200
        for method, path in (("GET", "/api/jobs"), ("GET", "/api/runs"), ("POST", "/api/seed"), ("GET", "/"),
                             ("GET", "/docs"), ("GET", "/openapi.json")):
            assert http.request(method, path).status_code == 401, path
        assert http.get("/api/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        good = {"Authorization": "Bearer s3cret-token"}
        assert http.get("/api/jobs", headers=good).status_code == 200
        assert http.post("/api/seed", json=seed_body(), headers=good).status_code == 200
        opened = http.get("/?api_token=s3cret-token", follow_redirects=False)
        assert opened.status_code == 303 and "petri_api_token" in opened.headers["set-cookie"]
        assert http.get("/", cookies={"petri_api_token": "s3cret-token"}).status_code == 200
    svc.shutdown()
