"""The Study tab's overhead: the same small study through the UI (a real browser) and through
``POST /api/jobs/study``, on one server, side by side.

Starts ``python app.py`` (the embedded model unless ``--tiny-random``) on loopback with a fresh
store, then

- API: submits the study (seed ``--seed``) and polls ``GET /api/jobs/{id}`` until it is done;
- UI: Debian's chromium (Playwright) opens the Study tab, uploads the same study file, sets the
  samples, steps and seed (``--seed + 1``: another run id, so nothing resumes), clicks *Run the
  study* and waits for the status line's ``Done``.

Both runs sample the same number of batches of the same size; prints one JSON object with both
wall times (seconds), their ratio and the per-batch times the UI's status line reported.

    python experiments/ui_study_overhead.py --events 10 --samples 2 --steps 8
    python experiments/ui_study_overhead.py --study assets/studies/inventory_order.json --samples 2 --steps 8
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from reliability_support import AppProcess  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def study_file(events: int) -> dict:
    """``events`` events (half benign, half contradictory), one template."""
    groups = ("benign", "contradictory")
    return {
        "schema": 1, "id": "overhead", "title": "Overhead study", "language": "en",
        "concepts": ["order", "inventory", "person"], "comparison": {"groups": list(groups)},
        "templates": [{"id": "t1", "text": "Event: {event}\nDescribe how {concepts} relate."}],
        "events": [{"id": f"e{i}", "group": groups[i % 2], "text": f"The order of stock number {i} was counted."}
                   for i in range(events)],
    }


def run_api(url: str, study: dict, samples: int, steps: int, seed: int) -> float:
    body = {"study": study, "samples": samples, "seed": seed, "settings": {"max_denoising_steps": steps}}
    start = time.perf_counter()
    job = httpx.post(url + "/api/jobs/study", json=body, timeout=60).json()
    while True:
        state = httpx.get(f"{url}/api/jobs/{job['job_id']}", timeout=30).json()
        if state["status"] in ("done", "failed", "cancelled", "interrupted"):
            break
        time.sleep(0.05)
    wall = time.perf_counter() - start
    if state["status"] != "done":
        raise RuntimeError(f"the API study ended {state['status']}: {state.get('error')}")
    return wall


def run_ui(url: str, path: Path, samples: int, steps: int, seed: int) -> tuple[float, list[float]]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(600_000)
        page.goto(url)
        page.click("button[role=tab]:has-text('Study')")
        page.click("button:has-text('Study set-up')")
        page.set_input_files("#petri-study-upload input[type=file]", str(path))
        page.wait_for_selector("text=Loaded Overhead study")
        page.fill("#petri-study-samples input[type=number]", str(samples))
        page.fill("#petri-study-steps input[type=number]", str(steps))
        page.fill("#petri-study-seed input[type=number]", str(seed))
        page.locator("#petri-study-seed input[type=number]").blur()
        page.wait_for_timeout(500)
        start = time.perf_counter()
        page.click("#petri-study-run")
        seen, marks, changed = -1, [], time.perf_counter()
        while True:
            text = page.inner_text("#petri-study-status")
            if text.startswith("Done"):
                break
            found = [int(w) for w in text.split(" of ")[0].split()[-1:] if w.isdigit()]
            if found and found[0] != seen:
                seen, changed = found[0], time.perf_counter()
                marks.append(changed - start)
            if time.perf_counter() - changed > 120:
                raise RuntimeError(f"the Study tab's status stopped at {text!r}")
            page.wait_for_timeout(100)
        wall = time.perf_counter() - start
        browser.close()
    per_batch = [round(b - a, 2) for a, b in zip([0.0, *marks], marks)]
    return wall, per_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--study", type=Path, help="a study file to run instead (its first template)")
    parser.add_argument("--tiny-random", action="store_true")
    args = parser.parse_args()
    study = json.loads(args.study.read_text(encoding="utf-8")) if args.study else study_file(args.events)
    study["templates"] = study["templates"][:1]
    study["title"] = "Overhead study"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "overhead.json"
        path.write_text(json.dumps(study), encoding="utf-8")
        extra = ["--tiny-random"] if args.tiny_random else []
        with AppProcess(*extra, "--store", str(folder / "store"), log=folder / "app.log") as app:
            run_api(app.url, study, args.samples, 2, args.seed + 100)  # warm-up: the first job's one-off costs
            api = run_api(app.url, study, args.samples, args.steps, args.seed)
            ui, per_batch = run_ui(app.url, path, args.samples, args.steps, args.seed + 1)
    print(json.dumps({"study": str(args.study or "generated"), "events": len(study["events"]), "samples": args.samples,
                      "steps": args.steps, "api_s": round(api, 2),
                      "ui_s": round(ui, 2), "ui_over_api": round(ui / api, 2), "ui_per_batch_s": per_batch}))


if __name__ == "__main__":
    main()
