"""A seed through the ZeroGPU path (petri/web/gpu_executor.py) under the fork harness
(tests/zerogpu_support.py), on the CPU with the tiny model: the same stored records as the
dedicated path for the same seed, the GPU work in a forked child only, no worker thread, ``POST
/api/seed`` answering 501 there (its work is the Gradio endpoint /seed), an aborted call keeping its
finished events, a cancel."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

import zerogpu_support as harness
from petri.core.cancel import Cancelled, CancelToken
from petri.core.dish import Dish
from petri.core.plan import SeedEvent
from petri.web import gpu_executor
from petri.web.app import create_app
from petri.web.gpu import run_seed
from petri.web.gpu_executor import GpuAborted, run_zerogpu_seed, zerogpu_seed_stream

EVENTS = [SeedEvent(Dish(["order", "inventory"], f"Only {n} units are in stock.", "{event}"), group=g)
          for n, g in ((90, "a"), (80, "b"), (70, None))]
RECORDS = ("argmax", "entropy", "accepted", "steps", "anchor_mask", "final_ids", "canvas")


def plan_of(service, events=EVENTS, samples: int = 3, seed: int = 7, steps: int = 5):
    from petri.core.trajectory import SamplerSettings

    return service.plan(events, samples, SamplerSettings(max_denoising_steps=steps, stability_threshold=None,
                                                        confidence_threshold=None), seed)


def assert_same_records(service, run_a: str, run_b: str) -> None:
    a, b = service.store.load_events(run_a), service.store.load_events(run_b)
    assert len(a) == len(b) > 0
    for (key_a, group_a, ta), (key_b, group_b, tb) in zip(a, b):
        assert (key_a, group_a) == (key_b, group_b)
        for name in RECORDS:
            np.testing.assert_array_equal(getattr(ta, name), getattr(tb, name), err_msg=name)
        assert ta.final_texts == tb.final_texts


def test_a_seed_on_zerogpu_stores_the_same_records_as_the_dedicated_path(service, monkeypatch):
    dedicated = service.seed(plan_of(service))
    harness.serve_on_zerogpu(monkeypatch, service)
    steps = []
    result = run_zerogpu_seed(service, plan_of(service), on_step=steps.append)
    assert_same_records(service, dedicated.run_id, result.run_id)
    assert service.get_run(result.run_id)["status"] == "done"
    (call,) = harness.CALLS  # one GPU call for the whole seed, in a child that is gone
    assert call.pid != os.getpid() and call.exitcode == 0 and call.yields == len(steps) + len(EVENTS)
    assert [s.index for s in steps[:5]] == [0, 1, 2, 3, 4] and all(isinstance(s.argmax, np.ndarray) for s in steps)
    assert service.jobs._worker is None  # no worker thread was started
    assert not harness.parent_cuda_initialised()


def test_off_zerogpu_the_seed_route_keeps_the_dedicated_path(service, count_calls):
    calls = count_calls(gpu_executor, "run_zerogpu_seed")
    run_seed(service, plan_of(service, EVENTS[:1]))
    assert calls == []


def test_post_api_seed_answers_501_on_zerogpu_and_runs_nothing(service, monkeypatch):
    """On ZeroGPU the route's work is the Gradio endpoint /seed (tests/web/test_zerogpu_api.py): a
    FastAPI request carries no visitor quota token."""
    body = {"events": [{"event": "Only 90 units are in stock."}], "concepts": ["order", "inventory"],
            "template": "{event}", "samples": 2, "seed": 3, "settings": {"max_denoising_steps": 4, "adaptive_stop": False}}
    with TestClient(create_app(service, ui=False)) as client:
        dedicated = client.post("/api/seed", json=body)
        harness.serve_on_zerogpu(monkeypatch, service)
        zero = client.post("/api/seed", json=body)
    assert dedicated.status_code == 200 and zero.status_code == 501, zero.text
    assert zero.json()["gradio_endpoint"] == "/seed"
    assert harness.CALLS == [] and len(service.store.list_runs()) == 1


def test_an_aborted_call_keeps_the_finished_events_and_says_so(service, monkeypatch):
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(gpu_executor, "_duration_s", [4])  # PETRI_GPU_DURATION_S=4, as create_app passes it on
    real = gpu_executor.sample_planned

    def slow_third(lm, plan, index, on_step=None, cancel=None):
        if index == 2:  # the third event outlasts the call's duration
            time.sleep(60)
        return real(lm, plan, index, on_step=on_step, cancel=cancel)

    monkeypatch.setattr(gpu_executor, "sample_planned", slow_third)  # before the fork: the child has it
    plan = plan_of(service)
    with pytest.raises(GpuAborted) as err:
        run_zerogpu_seed(service, plan)
    assert err.value.stored == 2 and err.value.total == 3 and "GPU task aborted" in str(err.value)
    stored = service.store.load_events(plan.run_id)
    assert [key for key, _, _ in stored] == ["event0", "event1"]
    run = service.get_run(plan.run_id)
    assert run["status"] == "failed" and "GPU task aborted" in run["error"]
    (call,) = harness.CALLS
    assert call.aborted and call.exitcode == -9 and call.duration_s == 4


def test_a_cancel_stops_the_call_within_a_step_and_marks_the_run(service, monkeypatch):
    harness.serve_on_zerogpu(monkeypatch, service)
    token = CancelToken()
    plan = plan_of(service, steps=40)
    seen = []
    with pytest.raises(Cancelled):
        for _kind, payload in zerogpu_seed_stream(service, plan, cancel=token):
            seen.append(payload.index)
            token.cancel("cancelled")
    assert seen == [0]  # the next frame saw the cancel
    assert service.get_run(plan.run_id)["status"] == "cancelled" and service.store.load_events(plan.run_id) == []
    (call,) = harness.CALLS
    assert call.exitcode == 0 and not call.aborted  # asked to stop, the child ended on its own


def test_without_the_spaces_package_the_decorator_is_the_identity(monkeypatch):
    monkeypatch.setitem(sys.modules, "spaces", None)  # import spaces raises ImportError
    assert gpu_executor.spaces_gpu(duration=5)(gpu_executor.seed_frames) is gpu_executor.seed_frames
