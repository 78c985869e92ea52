"""petri's server with the **real** ``spaces`` package in ZeroGPU mode, against a local stand-in of
the device API it calls (tests/zerogpu_device_api.py), on the CPU with the tiny random model.

The server runs as a Space runs it (``python app.py`` → :func:`petri.web.server.main`, in a process
of its own started by tests/zerogpu_spaces_app.py), with ``SPACES_ZERO_GPU=true``: ``spaces``'
patching, its start-up (which petri runs itself: it never calls ``launch()``), its scheduling, its
forked worker, its pickling and the request context are the real ones; only the two functions that
need an NVIDIA card are stood in for (see tests/zerogpu_spaces_app.py). Skipped without ``spaces``
(requirements-dev.txt pins the version the platform pins)."""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from study_support import study_dict
from zerogpu_device_api import GPU_UUID, DeviceApi

pytestmark = pytest.mark.skipif(importlib.util.find_spec("spaces") is None, reason="the spaces package is not installed")

TESTS = Path(__file__).resolve().parent.parent
BODY = {"events": [{"event": "Only 90 units are in stock.", "group": "a"}, {"event": "120 were ordered."}],
        "concepts": ["order", "inventory"], "template": "{event}", "samples": 2, "seed": 3,
        "settings": {"max_denoising_steps": 4, "adaptive_stop": False}}
#: A seed long enough to be killed mid-way: 3 events × 256 steps.
LONG = {**BODY, "events": [{"event": f"{n} units are in stock."} for n in (90, 80, 70)],
        "settings": {"max_denoising_steps": 256, "adaptive_stop": False}}
#: A study of 4 events and one template: 4 batches, a GPU call each.
STUDY = {"study": study_dict("spaces-study", "Study through spaces", templates=1), "samples": 2, "seed": 5,
         "settings": {"max_denoising_steps": 4}}
PER_RUN = ("run_id", "timings", "csv", "created_at", "finished_at")


def same_work(answer: dict) -> dict:
    kept = {k: v for k, v in answer.items() if k not in PER_RUN}
    kept["events"] = [{k: v for k, v in event.items() if k != "timings"} for event in answer["events"]]
    return kept


def visitor_token() -> str:
    """A JWT-shaped ``X-IP-Token`` (``spaces`` reads its payload; nothing checks its signature here)."""
    part = lambda data: base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")  # noqa: E731
    return f"{part({'alg': 'none'})}.{part({'sub': 'visitor'})}.sig"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_real_spaces_package_runs_the_seed_endpoint_in_its_forked_worker(tmp_path, tiny_random_answer):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    log = tmp_path / "standin.log"
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("0::/petri-standin\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    token = visitor_token()
    output = (tmp_path / "server.out").open("w")  # a file: a full pipe would block the server
    with DeviceApi(idle=(False, True, True, True, True, True, False)) as api:  # 2 seeds, 4 study batches, 1 seed
        env = {**os.environ, "SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": api.url,
               "ZEROGPU_PROC_SELF_CGROUP_PATH": str(cgroup), "ZEROGPU_OFFLOAD_DIR": str(tmp_path / "offload"),
               "HOME": str(tmp_path / "home"), "PETRI_STANDIN_LOG": str(log), "GRADIO_ANALYTICS_ENABLED": "False",
               "PETRI_GPU_DURATION_S": "60"}  # every call asks for 60 s (unset: each call's estimate)
        server = subprocess.Popen([sys.executable, str(TESTS / "zerogpu_spaces_app.py"), "--tiny-random",
                                   "--store", str(tmp_path / "store"), "--host", "127.0.0.1", "--port", str(port)],
                                  env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(url, server)
            started = list(api.calls)
            client = Client(url, headers={"X-IP-Token": token}, verbose=False)
            first = client.predict(BODY, api_name="/seed")
            second = client.predict(BODY, api_name="/seed")  # the device API says idle: the same child again
            study = client.predict(STUDY, api_name="/study")  # a call per batch, from a thread of the request
            api.kill_after_allow_s = 1.0  # the third child is killed as a task past its time would be
            with pytest.raises(AppError, match="GPU task aborted") as aborted:
                client.predict(LONG, api_name="/seed")
            with httpx.Client(base_url=url, timeout=60) as http:
                refused = http.post("/api/seed", json=BODY)
                runs = http.get("/api/runs").json()
        finally:
            stop(server)
            output.close()

    assert [name for name, _ in started] == ["startup-report"]  # run by petri, which never calls launch()
    schedules = api.named("schedule")
    assert len(schedules) == 7 and {s["token"] for s in schedules} == {token}  # the visitor's quota token
    assert {s["durationSeconds"] for s in schedules} == {"60"} and {s["cgroupPath"] for s in schedules} == {"/petri-standin"}
    allows = api.named("allow")
    # an idle answer reuses the child of the same decorated function: the seed's for the second seed, the
    # first batch's (spaces keeps children per function) for the other three batches
    assert [a["allowToken"] for a in allows] == ["allow-1", "allow-3", "allow-7"]
    children = [int(line.split()[1]) for line in log.read_text().splitlines()]
    assert [int(a["pid"]) for a in allows] == children and server.pid not in children
    assert {line.split()[2] for line in log.read_text().splitlines()} == {GPU_UUID}
    releases = api.named("release")
    assert [(r["allowToken"], r["fail"]) for r in releases] == [(f"allow-{n}", "false") for n in range(1, 7)] + [
        ("allow-7", "true")]

    assert same_work(first) == same_work(second) == same_work(tiny_random_answer)
    assert study["kind"] == "study" and study["computed"] == study["batches"] == 4
    assert "of 3 events finished and are stored" in str(aborted.value)
    killed = next(r for r in runs if r["run_id"] not in (first["run_id"], second["run_id"], study["run_id"]))
    assert killed["status"] == "failed" and "GPU task aborted" in killed["error"]
    assert refused.status_code == 501 and refused.json()["gradio_endpoint"] == "/seed"


def stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server, then SIGKILL to its process group (its own session): ``spaces``' forked
    worker outlives a killed parent, blocked on its queue (on a Space the container goes with it)."""
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait()


def wait_for(url: str, server: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the server exited ({server.returncode}); its output is in server.out")
        try:
            if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError("the server did not answer within the time")


@pytest.fixture()
def tiny_random_answer(tmp_path):
    """``POST /api/seed``'s answer for :data:`BODY` on the dedicated path, with the model
    ``--tiny-random`` serves, in this process."""
    from fastapi.testclient import TestClient

    from petri.app.service import PetriService
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    service = PetriService(tiny_random_model(canvas_length=64), RunStore(tmp_path / "dedicated"))
    try:
        with TestClient(create_app(service, ui=False)) as api:
            answer = api.post("/api/seed", json=BODY)
    finally:
        service.shutdown()
    assert answer.status_code == 200, answer.text
    return answer.json()
