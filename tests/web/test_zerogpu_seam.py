"""Studies and probe reads on the ZeroGPU seam (petri/web/gpu_executor.py) under the fork harness
(tests/zerogpu_support.py), on the CPU with the tiny model: the study stream the Study tab reads
(each batch one call carrying the caller's Gradio request, where ``spaces`` reads the visitor's
quota token), a refused call (quota exceeded) that keeps the stored batches and a rerun that
resumes (``POST /api/study`` and ``POST /api/probe`` answer 501 on ZeroGPU: tests/web/test_zerogpu_api.py),
a read that stores what the service's read stores, and each call's ``duration`` estimated from the work it carries."""

from __future__ import annotations

import numpy as np
import pytest
from gradio.context import LocalContext

import zerogpu_support as harness
from petri.core.trajectory import SamplerSettings
from petri.engine.probe import plan_probe
from petri.study.execution.runner import StudyProgress, StudyResult
from petri.study.plan import StudyPlan
from petri.study.schema import study_from_dict
from petri.web import gpu_executor
from petri.web.api.probe_requests import read_request
from petri.web.gpu_cost import CallWork, duration_s
from petri.web.gpu_executor import (
    GpuAborted,
    read_work,
    run_zerogpu_read,
    run_zerogpu_seed,
    run_zerogpu_study,
    seed_work,
    zerogpu_study_stream,
)
from study_support import study_dict

RECORDS = ("argmax", "entropy", "accepted", "steps", "anchor_mask", "final_ids", "canvas")
SETTINGS = SamplerSettings(max_denoising_steps=4, stability_threshold=None, confidence_threshold=None)
STUDY = study_dict("zg", "ZeroGPU study", templates=1)  # 4 events x 1 template


def assert_same_batches(store, run_a, run_b) -> None:
    a, b = store.load_events(run_a), store.load_events(run_b)
    assert [k for k, _, _ in a] == [k for k, _, _ in b] and len(a) == 4
    for (_, _, ta), (_, _, tb) in zip(a, b):
        for name in RECORDS:
            np.testing.assert_array_equal(getattr(ta, name), getattr(tb, name), err_msg=name)


def test_the_study_stream_makes_a_call_a_batch_each_carrying_the_callers_request(service, monkeypatch):
    harness.serve_on_zerogpu(monkeypatch, service)
    visitor = object()  # what Gradio puts in the handler's context: spaces reads the quota token from it
    token = LocalContext.request.set(visitor)
    try:
        items = list(zerogpu_study_stream(service, StudyPlan(study_from_dict(STUDY), samples=2, seed=5,
                                                             settings=SETTINGS), owner="someone"))
    finally:
        LocalContext.request.reset(token)
    *progress, (kind, result) = items
    assert kind == "done" and isinstance(result, StudyResult) and result.computed == 4
    assert [p.done for _, p in progress] == [1, 2, 3, 4] and all(isinstance(p, StudyProgress) for _, p in progress)
    assert len(harness.CALLS) == 4 and all(c.request is visitor for c in harness.CALLS)
    assert all(c.exitcode == 0 for c in harness.CALLS) and service.jobs._worker is None
    assert service.store.owns_run(result.run_id, "someone")
    assert service.get_run(result.run_id)["status"] == "done"


def test_a_refused_call_keeps_the_stored_batches_and_the_study_resumes(service, monkeypatch):
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(gpu_executor, "_duration_s", [10])  # each call asks for 15 s of quota on a large card
    monkeypatch.setattr(harness.QUOTA, "left_s", 30)  # two calls' worth
    plan = StudyPlan(study_from_dict(STUDY), samples=2, seed=5, settings=SETTINGS)
    with pytest.raises(GpuAborted) as err:
        list(zerogpu_study_stream(service, plan))
    assert err.value.refusal.startswith("ZeroGPU quota exceeded: You have exceeded your free ZeroGPU quota")
    assert "2 of 4 batches to compute finished and are stored in run" in str(err.value)
    run_id = err.value.run_id
    assert len(service.store.load_events(run_id)) == 2 and service.get_run(run_id)["status"] == "failed"
    assert len(harness.CALLS) == 3  # the third was refused before any child started
    assert harness.CALLS[2].pid is None
    monkeypatch.setattr(harness.QUOTA, "left_s", None)  # the quota refilled
    again = run_zerogpu_study(service, plan)
    assert (again.run_id, again.resumed, again.computed) == (run_id, 2, 2) and len(harness.CALLS) == 5
    fresh = service.run_study(plan)  # the dedicated path, in this process
    assert fresh.run_id == run_id and fresh.computed == 0  # the same run: nothing left to compute
    harness.CALLS.clear()


READ_BODY = {"prompt": "Only 90 units are in stock, but a customer ordered 120.", "frame": "ok: {{consistent}}",
             "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}], "samples": 2, "steps": 2, "seed": 3,
             "order": "cyclic"}
READ = read_request(READ_BODY)


def test_a_read_on_zerogpu_is_one_call_and_stores_what_the_services_read_stores(service, monkeypatch):
    plan = plan_probe(service.lm, READ)
    here = service.probe(plan)
    harness.serve_on_zerogpu(monkeypatch, service)
    zero = run_zerogpu_read(service, plan, owner=None)
    assert zero.run_id != here.run_id and service.get_run(zero.run_id)["status"] == "done"
    stored = service.load_results(zero.run_id)["read"]
    assert stored["request"] == here.document["request"]
    for a, b in zip(stored["reads"], here.document["reads"]):
        assert a["question"] == b["question"] and a["step"] == b["step"] and a["answer"] == b["answer"]
        np.testing.assert_allclose(a["probs"], b["probs"], rtol=1e-6)
    (call,) = harness.CALLS
    assert call.exitcode == 0 and call.yields == 1
    # the read's work: 2 draws, 2 steps, one question read in 2 cyclic orders, the prompt as planned
    work = read_work(plan, service.lm)
    assert (work.samples, work.steps, work.events, work.canvas) == (2, 2, 2, service.lm.canvas_length)
    assert call.duration_s == duration_s(work)


def test_a_refused_read_stores_nothing_and_says_so(service, monkeypatch):
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(harness.QUOTA, "left_s", 0)
    before = len(service.store.list_runs(50))
    with pytest.raises(GpuAborted, match="ZeroGPU quota exceeded.*; nothing was stored"):
        run_zerogpu_read(service, plan_probe(service.lm, READ))
    assert len(service.store.list_runs(50)) == before


def test_a_seed_call_asks_for_the_duration_its_work_is_estimated_at(service, monkeypatch):
    from petri.core.dish import Dish
    from petri.core.plan import SeedEvent

    events = [SeedEvent(Dish(["order", "inventory"], f"Only {n} units are in stock.", "{event}")) for n in (90, 8)]
    plan = service.plan(events, 3, SETTINGS, 1)
    work = seed_work(plan)
    prompts = [len(p.prompt.ids) for p in plan.events]
    assert work == CallWork(3, 4, service.lm.canvas_length, max(prompts), 2)
    harness.serve_on_zerogpu(monkeypatch, service)
    run_zerogpu_seed(service, plan)
    assert harness.CALLS[0].duration_s == duration_s(work)
