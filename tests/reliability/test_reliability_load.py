"""Load: a burst of concurrent ``POST /api/seed`` against the real server (``python app.py`` on the
embedded model, a subprocess on loopback). Bounded in count (50; 200 with ``PETRI_HEAVY=1``) and in
time (every request has a timeout; the burst stops by itself).

Every request either completes (200, a run id, status done) or is refused with a clear busy status
(503 + ``Retry-After`` + "busy"); ``/api/health`` answers during and after the burst; the server
process stays up; and no run's results mix with another's: each stored run's tables equal those of
a solo rerun of the same request (same seed) on the idle server.

The CI run uses a server started with ``--busy-wait 60``: requests wait for the model, at most
``MAX_QUEUED`` at a time, and the rest are refused at once, so waiting requests never take every
worker thread. That gives many completed runs that were queued together, which is the strongest
check that results never mix, and it still tests refusals. Of the completed runs, 8 are compared
with a solo rerun. ``PETRI_HEAVY=1`` sends 200 requests, compares every completed run, and adds a
server with ``--busy-wait 0`` (the default, where a request that finds the model busy is refused
at once; tests/web/api/test_api.py also covers that path).
"""

from __future__ import annotations

import io
import threading
import time
from collections import Counter

import httpx
import pandas as pd
import pytest

from petri.web.limits import MAX_QUEUED
from reliability_support import EMBEDDED, HEAVY, AppProcess, listening_addresses

N_REQUESTS = 200 if HEAVY else 50
#: Completed runs compared with a solo rerun (every one with PETRI_HEAVY=1).
SOLO_RERUNS = None if HEAVY else 8
REQUEST_TIMEOUT_S = 300.0
TABLES = ("segments", "samples", "positions")
#: Figures of each burst, printed at the end of the module (``pytest -s``) for RELIABILITY.md.
FIGURES: dict[str, dict] = {}


def body(i: int) -> dict:
    """Request ``i``: its own seed, event and concept order, so mixed-up results would show."""
    concepts = ["order", "inventory", "person"]
    return {
        "concepts": concepts[i % 3:] + concepts[: i % 3],
        "event": f"Customer {i} ordered {10 + i} lamps but only {i} are in stock.",
        "group": "load",
        "samples": 2,
        "settings": {"max_denoising_steps": 4, "adaptive_stop": False},
        "seed": 1000 + i,
    }


def tables(client: httpx.Client, run_id: str) -> dict[str, str]:
    out = {}
    for name in TABLES:
        r = client.get(f"/api/runs/{run_id}/{name}.csv")
        assert r.status_code == 200, (run_id, name, r.text[:300])
        out[name] = r.text
    return out


@pytest.fixture(scope="module", params=[60, 0] if HEAVY else [60], ids=lambda wait: f"busy-wait-{wait}")
def server(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"load-{request.param}")
    app = AppProcess("--model", str(EMBEDDED), "--device", "cpu", "--store", str(folder / "store"),
                     "--busy-wait", str(request.param), log=folder / "server.log")
    with app:
        app.busy_wait = request.param
        yield app


def test_burst_of_concurrent_seeds(server):
    n = N_REQUESTS
    results: dict[int, httpx.Response | BaseException] = {}
    health: list[tuple[int | str, float]] = []
    barrier = threading.Barrier(n + 1)
    burst_over = threading.Event()

    def one(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as client:
            barrier.wait(timeout=120)
            try:
                results[i] = client.post("/api/seed", json=body(i))
            except BaseException as err:  # noqa: BLE001 - a timeout or a dropped connection is a failure
                results[i] = err

    def watch_health() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not burst_over.is_set():
                started = time.monotonic()
                try:
                    r = client.get("/api/health")
                    health.append((r.status_code, time.monotonic() - started))
                except httpx.HTTPError as err:
                    health.append((type(err).__name__, time.monotonic() - started))
                burst_over.wait(0.1)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    watcher = threading.Thread(target=watch_health, daemon=True)
    watcher.start()
    barrier.wait(timeout=120)
    started = time.monotonic()
    for t in threads:
        t.join(REQUEST_TIMEOUT_S + 60)
    wall = time.monotonic() - started
    burst_over.set()
    watcher.join(60)
    assert not any(t.is_alive() for t in threads), "a request never returned"

    # every request: completed (200 + run id) or refused as busy (503 + Retry-After); nothing else
    failures = {i: r for i, r in results.items() if not isinstance(r, httpx.Response)}
    assert not failures, f"requests failed without an HTTP answer: {failures}"
    codes = Counter(r.status_code for r in results.values())
    assert set(codes) <= {200, 503}, {i: (r.status_code, r.text[:300]) for i, r in results.items() if r.status_code not in (200, 503)}
    completed = {i: r.json() for i, r in results.items() if r.status_code == 200}
    for r in results.values():
        if r.status_code == 503:
            assert r.headers.get("retry-after", "").isdigit() and "busy" in r.json()["detail"], r.text
    assert completed, "no request completed"
    for i, run in completed.items():
        assert run["status"] == "done" and len(run["run_id"]) == 32, run
        assert run["events"][0]["event"] == body(i)["event"] and run["events"][0]["seed"] == body(i)["seed"]
    assert len({run["run_id"] for run in completed.values()}) == len(completed)
    if server.busy_wait > 0:  # one runs, MAX_QUEUED wait: all of those complete
        assert len(completed) >= min(n, MAX_QUEUED + 1) - 1, codes

    # the server stayed up: health answered during the burst and answers now
    assert server.alive, server.tail()
    assert health and all(code == 200 for code, _ in health), health
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert client.get("/api/health").json()["busy"] is False

        # nothing mixed: each stored run's tables equal a solo rerun of the same request
        stored = {i: tables(client, run["run_id"]) for i, run in completed.items()}
        for i, run in completed.items():  # every stored row is this request's own event and seed
            for name, text in stored[i].items():
                frame = pd.read_csv(io.StringIO(text))
                if "event" in frame:  # samples and pairs carry the text; positions and segments its index
                    assert set(frame["event"]) == {body(i)["event"]}, (i, name)
                else:
                    assert set(frame["event_index"]) == {0}, (i, name)
            again = client.get(f"/api/runs/{run['run_id']}").json()
            assert again["status"] == "done" and again["events"][0]["seed"] == body(i)["seed"]
        for i in list(completed)[:SOLO_RERUNS]:
            solo = client.post("/api/seed", json=body(i))
            assert solo.status_code == 200, solo.text[:300]
            again = tables(client, solo.json()["run_id"])
            for name in TABLES:
                assert stored[i][name] == again[name], f"request {i}: stored {name} table differs from a solo rerun"
    assert server.alive

    FIGURES[f"busy_wait={server.busy_wait}"] = {
        "requests": n, "completed": len(completed), "refused_503": codes.get(503, 0), "other": 0,
        "burst_wall_s": round(wall, 1), "health_checks": len(health),
        "health_max_s": round(max(s for _, s in health), 2),
        "solo_reruns_equal": len(list(completed)[:SOLO_RERUNS]),
    }
    print(f"\nload figures: {FIGURES}")


def test_default_bind_is_loopback(server):
    """The server was started without --host: it listens on 127.0.0.1 only."""
    addresses = listening_addresses(server.port)
    if not addresses:
        pytest.skip("no /proc/net/tcp here to read the listening address from")
    assert addresses == {"127.0.0.1"}, addresses
