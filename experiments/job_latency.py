"""How fast long work stops: cancel latency of a running study job, and a server's exit after SIGTERM.

Starts ``python app.py --tiny-random`` on loopback, submits a study job (the embedded-model-sized
canvas of 64, 48 steps, no adaptive stop), and measures, ``--repeats`` times each:

- cancel: ``DELETE /api/jobs/{id}`` once a batch is stored → the job reads ``cancelled``;
- SIGTERM: the signal once a batch is stored → the process has exited (and the job reads
  ``interrupted`` in the store).

Prints one JSON object (medians and every sample, in seconds).

    python experiments/job_latency.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from petri.runs.store import RunStore  # noqa: E402
from reliability_support import AppProcess  # noqa: E402

STUDY = {
    "id": "latency", "title": "Latency", "language": "en", "concepts": ["order", "inventory", "person"],
    "comparison": {"groups": ["benign", "contradictory"]},
    "templates": [{"id": "t1", "text": "Event: {event}\nDescribe {concepts}."}],
    "events": [{"id": f"{g[0]}{i}", "group": g, "text": f"An event about stock ({g} {i})."}
               for g in ("benign", "contradictory") for i in range(1, 9)],
}
BODY = {"study": STUDY, "samples": 12, "seed": 0, "settings": {"max_denoising_steps": 48, "adaptive_stop": False}}


def until(condition, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)


def one_batch_stored(app: AppProcess, job_id: str) -> bool:
    return httpx.get(f"{app.url}/api/jobs/{job_id}", timeout=30).json()["progress"]["done"] >= 1


def measure_cancel(folder: Path) -> float:
    with AppProcess("--tiny-random", "--store", str(folder), log=folder / "app.log") as app:
        job = httpx.post(app.url + "/api/jobs/study", json=BODY, timeout=60).json()
        until(lambda: one_batch_stored(app, job["job_id"]))
        started = time.monotonic()
        httpx.delete(f"{app.url}/api/jobs/{job['job_id']}", timeout=30)
        until(lambda: httpx.get(f"{app.url}/api/jobs/{job['job_id']}", timeout=30).json()["status"] == "cancelled")
        return time.monotonic() - started


def measure_sigterm(folder: Path) -> float:
    app = AppProcess("--tiny-random", "--store", str(folder), log=folder / "app.log").start()
    job = httpx.post(app.url + "/api/jobs/study", json=BODY, timeout=60).json()
    until(lambda: one_batch_stored(app, job["job_id"]))
    started = time.monotonic()
    app.proc.send_signal(signal.SIGTERM)
    app.proc.wait(timeout=120)
    took = time.monotonic() - started
    app.stop()
    status = RunStore(folder).get_job(job["job_id"])["status"]
    if status != "interrupted":
        raise RuntimeError(f"the job reads {status!r} after SIGTERM")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cancel, sigterm = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            cancel.append(measure_cancel(Path(a)))
            sigterm.append(measure_sigterm(Path(b)))
    print(json.dumps({
        "model": "tiny-random (canvas 64), 12 samples × 48 steps per batch",
        "cancel_running_job_s": {"median": statistics.median(cancel), "samples": cancel},
        "sigterm_to_exit_s": {"median": statistics.median(sigterm), "samples": sigterm},
    }, indent=1))


if __name__ == "__main__":
    main()
