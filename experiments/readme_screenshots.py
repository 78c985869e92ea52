"""The README's screenshots of the Dish viewer on both model families and of the Compare tab.

    python experiments/readme_screenshots.py            # writes assets/screenshots/{viewer-uniform,viewer-masked,compare}.png

Serves the app on each embedded model (petri-small: uniform diffusion; petri-small-mdm: masked
diffusion) with a throwaway run store, runs a 4-sample dish with the default event and shows the
viewer at its middle step; on petri-small it also compares the two default events (4 samples each)
and keeps the Compare tab from its run line to the paired table. Needs Debian's chromium and Playwright
(never ``playwright install``). About 5 minutes on 2 CPU cores.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "assets" / "screenshots"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
MODELS = (("petri-small", 7871, "viewer-uniform.png"), ("petri-small-mdm", 7872, "viewer-masked.png"))


def serve(model: str, port: int, store: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(REPO / "app.py"), "--model", model, "--store", str(store),
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    for _ in range(180):
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
            return proc
        except httpx.HTTPError:
            time.sleep(1)
    proc.terminate()
    raise RuntimeError(f"the app on {model} did not start")


def viewer_shot(page, path: Path) -> None:
    page.fill("#petri-samples input[type=number]", "4")
    page.click("#petri-run")
    page.wait_for_function("(document.querySelector('#petri-status').innerText || '').includes('Done')", timeout=600_000)
    page.wait_for_selector("#petri-traj .pt[data-live='0']")
    steps = int(page.evaluate("document.querySelector('#petri-traj .pt').dataset.steps"))
    page.locator("#petri-traj .pt-slider").fill(str(steps // 2))
    page.wait_for_timeout(500)
    page.locator("#petri-traj").scroll_into_view_if_needed()
    page.locator("#petri-traj").screenshot(path=str(path))


def compare_shot(page, path: Path) -> None:
    page.click("button[role=tab]:has-text('Compare')")
    page.fill("#petri-cmp-samples input[type=number]", "4")
    page.click("#petri-cmp-run")
    page.wait_for_function("(document.querySelector('#petri-cmp-status').innerText || '').includes('Done')", timeout=600_000)
    page.wait_for_timeout(1500)
    top, bottom = page.evaluate("""() => { const r = (s) => document.querySelector(s).getBoundingClientRect();
        return [r('#petri-cmp-status').top + scrollY, r('#petri-cmp-paired').bottom + scrollY]; }""")
    page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": top - 10, "width": 1200, "height": bottom - top + 20})


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p, tempfile.TemporaryDirectory() as stores:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for model, port, name in MODELS:
            proc = serve(model, port, Path(stores) / model)
            try:
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_selector("#petri-run")
                viewer_shot(page, OUT / name)
                if model == "petri-small":
                    compare_shot(page, OUT / "compare.png")
            finally:
                proc.terminate()
                proc.wait()
        browser.close()
    print("wrote", ", ".join(str(OUT / n) for n in ("viewer-uniform.png", "viewer-masked.png", "compare.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
