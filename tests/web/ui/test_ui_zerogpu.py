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
from petri.web.ui.dish_tab.dish import DishController

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
    harness.stall_seed_after_step(monkeypatch, 2)  # 60 s, past the call's 4 s
    final = list(ctl.run(*dish_inputs(ctl, steps=20)))[-1]
    assert final["status"] == (f"Stopped: the GPU time of this call ran out (ZeroGPU: GPU task aborted); 0 of 1 events "
                               f"finished and are stored in run {final['run_badge'].split('`')[1]}; stopped at step 2.")
    assert "stopped<br>flips while sampling — step 2" in final["heatmap"].layout.title.text
    assert final["traj_view"]["steps"] == 3 and final["traj_view"]["title"] == "sample 0 (stopped run)"
    assert harness.CALLS[0].aborted


# ---------------------------------------------------------------- the other tabs and the quota (issue 63, items 1-4)

def study_inputs(steps=4, samples=2, seed=5):
    from test_ui_live import small_study

    meta, concepts, events, templates = small_study()
    return meta, concepts, events, templates, "benign, contradictory", "", ["t1"], samples, seed, steps


def test_a_zerogpu_study_runs_a_call_a_batch_an_abort_keeps_its_batches_and_a_rerun_resumes(service, monkeypatch, tmp_path):
    from petri.web.ui.study_tab.study import StudyController

    ctl = StudyController(service)
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(gpu_executor, "_duration_s", [4])
    real, calls = gpu_executor.sample_batch, tmp_path / "calls"

    def third_stalls(lm, job, on_step=None, cancel=None):
        with calls.open("a") as f:
            f.write(job.key + "\n")
        if len(calls.read_text().split()) == 3:
            time.sleep(60)  # past the call's 4 s
        return real(lm, job, on_step, cancel)

    monkeypatch.setattr(gpu_executor, "sample_batch", third_stalls)
    stopped = list(ctl.run(*study_inputs()))[-1]
    run_id = stopped["status"].split("`")[1]
    assert stopped["status"] == (f"Study run `{run_id}` stopped (the GPU time of this call ran out (ZeroGPU: GPU task "
                                 f"aborted); 2 of 4 batches to compute finished and are stored in run {run_id}); its "
                                 "stored batches stay (run it again to resume).")
    assert len(service.store.load_events(run_id)) == 2 and "provisional" in stopped["instability"].layout.title.text
    monkeypatch.setattr(gpu_executor, "sample_batch", real)
    final = list(ctl.run(*study_inputs()))[-1]
    assert final["status"].startswith(f"Done: study run `{run_id}` — final (4 of 4 batches)")
    assert len(harness.CALLS) == 5 and service.jobs._worker is None  # 3 calls, then the 2 batches left


def test_cancel_stops_a_zerogpu_study_and_keeps_its_stored_batches(service, monkeypatch):
    from petri.web.ui.study_tab.study import StudyController

    ctl = StudyController(service)
    harness.serve_on_zerogpu(monkeypatch, service)
    cancel = threading.Event()
    for update in ctl.run(*study_inputs(steps=40), cancel=cancel):
        last = update
        if " of 4 batches" in update.get("status", ""):
            cancel.set()  # once the first batch is stored
    run_id = last["status"].split("`")[1]
    assert last["status"] == (f"Study run `{run_id}` stopped (the job was cancelled); its stored batches stay (run it "
                              "again to resume).")
    assert service.get_run(run_id)["status"] == "cancelled" and 1 <= len(service.store.load_events(run_id)) < 4
    assert len(harness.CALLS) == len(service.store.load_events(run_id)) + 1 and not any(c.aborted for c in harness.CALLS)


def compare_inputs(samples=2, steps=4):
    return ("order, inventory", "calm", "The order was packed.", "tense", "None of it was in stock.", "{event}",
            samples, 0, steps, None, True, None, None, None, False, None)


def test_a_zerogpu_comparison_is_one_call_and_stores_what_the_dedicated_path_stores(service, monkeypatch):
    from petri.web.ui.compare import CompareController
    from petri.web.ui.dish_tab import dish_live

    monkeypatch.setattr(dish_live, "LIVE_REDRAW_S", 0.0)  # draw every step
    ctl = CompareController(service, DishController(service))
    dedicated = list(ctl.run(*compare_inputs()))[-1]
    harness.serve_on_zerogpu(monkeypatch, service)
    updates = list(ctl.run(*compare_inputs()))
    final = updates[-1]
    assert any(u.get("heatmap_a") is not None for u in updates[1:-1]) and any(u.get("heatmap_b") is not None for u in updates[1:-1])
    assert final["status"].startswith(f"Done: run `{final['run_id']}`") and len(harness.CALLS) == 1
    for (_, ga, a), (_, gb, b) in zip(service.store.load_events(final["run_id"]), service.store.load_events(dedicated["run_id"])):
        assert ga == gb
        for name in RECORDS:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


QUESTIONS = [["consistent", "", "yes, no", "", ""]]


def test_a_zerogpu_read_is_one_call_and_a_refused_one_says_so_plainly(service, monkeypatch):
    from petri.web.ui.probe_tab.probe import ProbeController

    ctl = ProbeController(service)
    harness.serve_on_zerogpu(monkeypatch, service)
    done = list(ctl.read("Only 90 units", "", "ok {{consistent}}", QUESTIONS, "1", 2, 0, "cyclic", 0.5))[-1]
    assert done["status"].startswith(f"Done: run `{done['run_id']}` — consistent = ") and len(harness.CALLS) == 1
    monkeypatch.setattr(harness.QUOTA, "left_s", 20)
    monkeypatch.setattr(gpu_executor, "_duration_s", [60])  # asks for 90 s of quota
    refused = list(ctl.read("Only 90 units", "", "ok {{consistent}}", QUESTIONS, "1", 2, 0, "cyclic", 0.5))[-1]
    assert refused == {"status": "Stopped: ZeroGPU did not start the GPU call (ZeroGPU quota exceeded: You have exceeded "
                                 "your free ZeroGPU quota (90s requested vs. 20s left). Try again in 0:12:00.); nothing "
                                 "was stored."}


def test_a_dish_whose_quota_is_spent_keeps_its_run_and_says_what_spaces_said(service, monkeypatch):
    ctl = DishController(service)
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(harness.QUOTA, "left_s", 0)
    final = list(ctl.run(*dish_inputs(ctl)))[-1]
    run_id = final["run_badge"].split("`")[1]
    assert final["status"].startswith("Stopped: ZeroGPU did not start the GPU call (ZeroGPU quota exceeded: You have "
                                      "exceeded your free ZeroGPU quota (")
    assert final["status"].endswith(f"); 0 of 1 events finished and are stored in run {run_id}; stopped before its first step.")
    assert service.get_run(run_id)["status"] == "failed" and harness.CALLS[0].pid is None


def ten_a_sample_step(lm):
    """A call costing 10 s a sample and step (on ``lm``'s canvas, any prompt): hand-workable."""
    from petri.web.gpu_cost import REFERENCE_CANVAS, GpuCost

    return GpuCost(step=0.0, sample_step=10.0 * REFERENCE_CANVAS / lm.canvas_length, prompt_token_step=0.0,
                   warm_up=0.0, cold_start=0.0, card=1.0, margin=1.0)


def test_a_zerogpu_dish_is_capped_to_one_calls_quota_and_its_cost_line_says_so(service, monkeypatch):
    from petri.web import gpu_cost
    from petri.web.ui.gpu_quota import seed_cost

    ctl = DishController(service)
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(gpu_cost, "DEFAULT_COST", ten_a_sample_step(service.lm))
    # 3 samples x 5 steps x 10 s = 150 s (225 s of quota); 2 x 5 x 10 = 100 s (150); 1 x 5 x 10 = 50 s (75): one sample
    line = seed_cost(ctl.build_request(*dish_inputs(ctl)), service.lm)
    assert line == ("**ZeroGPU cost** (estimated before the run): one GPU call of ≈ 50 s, asking for 75 s of your daily "
                    "GPU quota in all: 62 % of an anonymous visitor's 120 s, 25 % of a free account's 300 s, 3 % of a "
                    "PRO account's 2,400 s. ⚠ Capped to fit one ZeroGPU call (at most 120 s of quota, an anonymous "
                    "visitor's daily quota): samples 3 → 1, steps 5 → 5.")
    updates = list(ctl.run(*dish_inputs(ctl)))
    assert updates[0]["status"].startswith("⚠ Capped to fit one ZeroGPU call") and "Done" in updates[-1]["status"]
    assert service.get_run(updates[-1]["run_id"])["request"]["n_samples"] == 1
    assert harness.CALLS[0].duration_s == 50


def test_the_cost_lines_are_on_the_page_on_zerogpu_only(service, monkeypatch):
    from petri.web.ui.build import build_ui

    ids = ("petri-cost", "petri-cmp-cost", "petri-study-cost", "petri-probe-cost")

    def shown(blocks) -> dict:
        found = {getattr(b, "elem_id", None): b for b in blocks.blocks.values()}
        return {i: found[i] for i in ids if i in found}

    assert shown(build_ui(service)) == {}  # off ZeroGPU the page is as it was
    harness.serve_on_zerogpu(monkeypatch, service)
    boxes = shown(build_ui(service))
    assert set(boxes) == set(ids)
