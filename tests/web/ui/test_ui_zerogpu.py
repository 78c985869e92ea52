"""The Dish tab on ZeroGPU (``SPACES_ZERO_GPU``) under the fork harness (tests/zerogpu_support.py),
on the CPU with the tiny model: the run handler calls the ``spaces.GPU`` generator itself (no job, no
worker thread), streams the steps as it does on a dedicated GPU and stores the same records; Cancel
stops it within a step; an aborted call keeps the steps drawn so far and says plainly what happened."""

from __future__ import annotations

import threading
import time

import numpy as np
from test_ui import dish_inputs

import zerogpu_support as harness
from petri.web import gpu_executor
from petri.web.ui.dish import DishController

RECORDS = ("argmax", "entropy", "accepted", "steps", "anchor_mask", "final_ids", "canvas")


def test_a_dish_run_on_zerogpu_streams_and_stores_what_the_dedicated_path_stores(service, monkeypatch):
    ctl = DishController(service)
    harness.serve_on_zerogpu(monkeypatch, service)
    updates = list(ctl.run(*dish_inputs(ctl)))
    live, final = updates[1:-1], updates[-1]
    assert live and all(set(u) == {"status", "heatmap", "traj_view"} for u in live)  # as on a dedicated GPU
    assert "while sampling" in live[0]["heatmap"].layout.title.text and "Done" in final["status"]
    assert service.jobs._worker is None and len(harness.CALLS) == 1 and harness.CALLS[0].exitcode == 0
    monkeypatch.delenv("SPACES_ZERO_GPU")
    dedicated = list(ctl.run(*dish_inputs(ctl)))[-1]
    (_, _, zero), (_, _, ded) = service.store.load_events(final["run_id"])[0], service.store.load_events(dedicated["run_id"])[0]
    for name in RECORDS:
        np.testing.assert_array_equal(getattr(zero, name), getattr(ded, name), err_msg=name)
    assert len(harness.CALLS) == 1  # the dedicated run made no GPU call


def test_cancel_stops_a_zerogpu_dish_run_within_a_step(service, monkeypatch):
    ctl = DishController(service)
    harness.serve_on_zerogpu(monkeypatch, service)
    cancel = threading.Event()
    updates = []
    for update in ctl.run(*dish_inputs(ctl, steps=40), cancel=cancel):
        updates.append(update)
        if "heatmap" in update and update["heatmap"] is not None:
            cancel.set()  # at the first live step
    final = updates[-1]
    assert final["status"].startswith("Stopped: the job was cancelled; cancelled at step ")
    run_id = final["run_badge"].split("`")[1]
    assert service.get_run(run_id)["status"] == "cancelled"
    assert harness.CALLS[0].exitcode == 0 and not harness.CALLS[0].aborted


def test_an_aborted_zerogpu_dish_run_keeps_its_steps_and_says_so_plainly(service, monkeypatch):
    ctl = DishController(service)
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(gpu_executor, "_duration_s", [4])  # PETRI_GPU_DURATION_S=4, as create_app passes it on
    real = gpu_executor.sample_planned

    def stalls_after_step_2(lm, plan, index, on_step=None, cancel=None):
        def step(s):
            on_step(s)
            if s.index == 2:
                time.sleep(60)  # past the call's 4 s

        return real(lm, plan, index, on_step=step, cancel=cancel)

    monkeypatch.setattr(gpu_executor, "sample_planned", stalls_after_step_2)
    final = list(ctl.run(*dish_inputs(ctl, steps=20)))[-1]
    assert final["status"] == (f"Stopped: the GPU time of this call ran out (ZeroGPU: GPU task aborted); 0 of 1 events "
                               f"finished and are stored in run {final['run_badge'].split('`')[1]}; stopped at step 2.")
    assert "stopped<br>flips while sampling — step 2" in final["heatmap"].layout.title.text
    assert final["traj_view"]["steps"] == 3 and final["traj_view"]["title"] == "sample 0 (stopped run)"
    assert harness.CALLS[0].aborted
