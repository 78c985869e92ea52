"""The largest export the request limits allow, and whether downloading it stalls the server.

Starts ``python app.py --tiny-random`` (canvas 64) on loopback and posts the largest synchronous
seed the limits allow that makes the most text per row: 24 events of 1,900 characters, a
1,800-character template, 64 samples, 1 step (24 × 64 × 1 × 64 = 98,304 token-steps, under
``SYNC_MAX_TOKEN_STEPS``). Then, for each table: one download (size, seconds); and four concurrent
downloads of ``positions.csv`` while ``GET /api/health`` is polled every 50 ms (its slowest answer),
with the server's resident memory before, at peak (VmHWM) and after.

Prints one JSON object.

    python experiments/export_load.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from reliability_support import AppProcess  # noqa: E402

WORDS = "stock order inventory customer warehouse shipped units counted ".split()


def text(chars: int, salt: int) -> str:
    words, out = WORDS[salt % len(WORDS):] + WORDS[:salt % len(WORDS)], []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(words[len(out) % len(words)])
    return " ".join(out)[:chars]


def largest_body() -> dict:
    template = "{event} " + text(1800 - len("{event}  {concepts}"), 99) + " {concepts}"
    return {"concepts": ["order", "inventory", "person"], "template": template, "samples": 64, "seed": 1,
            "events": [{"event": text(1900, i), "group": "g" + str(i % 2)} for i in range(24)],
            "settings": {"max_denoising_steps": 1}}


def memory(pid: int) -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}  # MiB


def download(url: str) -> tuple[int, float]:
    started, size = time.monotonic(), 0
    with httpx.stream("GET", url, timeout=600) as r:
        r.raise_for_status()
        for chunk in r.iter_bytes():
            size += len(chunk)
    return size, time.monotonic() - started


def main() -> dict:
    folder = Path(tempfile.mkdtemp(prefix="petri-export-"))
    with AppProcess("--tiny-random", "--store", str(folder), log=folder / "app.log") as app:
        pid = app.proc.pid
        posted = httpx.post(app.url + "/api/seed", json=largest_body(), timeout=600)
        posted.raise_for_status()
        run_id = posted.json()["run_id"]
        tables = {}
        for name in ("positions", "segments", "samples", "pairs"):
            size, seconds = download(f"{app.url}/api/runs/{run_id}/{name}.csv")
            tables[name] = {"bytes": size, "seconds": round(seconds, 2)}
        before = memory(pid)
        results, slowest, stop = [], [0.0], threading.Event()

        def poll_health():
            while not stop.is_set():
                t = time.monotonic()
                httpx.get(app.url + "/api/health", timeout=60).raise_for_status()
                slowest[0] = max(slowest[0], time.monotonic() - t)
                time.sleep(0.05)

        poller = threading.Thread(target=poll_health)
        poller.start()
        started = time.monotonic()
        workers = [threading.Thread(target=lambda: results.append(download(f"{app.url}/api/runs/{run_id}/positions.csv")))
                   for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        four_s = time.monotonic() - started
        time.sleep(0.5)
        stop.set()
        poller.join()
        after = memory(pid)
    return {
        "request": "24 events × 1,900 chars, 1,800-char template, 64 samples, 1 step, canvas 64 (tiny random model)",
        "tables": tables,
        "four_concurrent_positions_downloads_s": round(four_s, 2),
        "each_download_bytes": [r[0] for r in results],
        "health_slowest_s_during_downloads": round(slowest[0], 3),
        "server_rss_mib": {"before": round(before["VmRSS"]), "peak_since_start": round(after["VmHWM"]),
                           "after": round(after["VmRSS"])},
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
