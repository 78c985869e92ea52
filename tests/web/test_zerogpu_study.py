"""A study's batches on ZeroGPU (``ZeroGpuStudyExecutor``: one ``spaces.GPU`` call per batch) under
the fork harness (tests/zerogpu_support.py), on the CPU with the tiny model: the same stored
records as the study run in this process, and an aborted call that keeps the finished batches, so
running the study again resumes it and ends with the same records."""

from __future__ import annotations

import time

import numpy as np
import pytest

import zerogpu_support as harness
from petri.core.trajectory import SamplerSettings
from petri.runs.store import RunStore
from petri.study.execution.runner import run_study
from petri.study.plan import StudyPlan
from petri.study.schema import study_from_dict
from petri.web import gpu_executor
from petri.web.gpu_executor import GpuAborted, ZeroGpuStudyExecutor
from study_support import study_dict

RECORDS = ("argmax", "entropy", "accepted", "steps", "anchor_mask", "final_ids", "canvas")
SETTINGS = SamplerSettings(max_denoising_steps=4, stability_threshold=None, confidence_threshold=None)


def run(lm_or_executor, store):
    study = study_from_dict(study_dict("zg", "ZeroGPU study", templates=1))  # 4 events x 1 template
    return run_study(lm_or_executor, StudyPlan(study, samples=2, seed=5, settings=SETTINGS), store)


def assert_same_batches(store_a, run_a, store_b, run_b) -> None:
    a, b = store_a.load_events(run_a), store_b.load_events(run_b)
    assert [k for k, _, _ in a] == [k for k, _, _ in b] and len(a) == 4
    for (_, _, ta), (_, _, tb) in zip(a, b):
        for name in RECORDS:
            np.testing.assert_array_equal(getattr(ta, name), getattr(tb, name), err_msg=name)


def test_a_study_on_zerogpu_runs_a_call_per_batch_and_stores_the_same_records(service, tmp_path, monkeypatch):
    here = run(service.lm, RunStore(tmp_path / "here"))
    harness.serve_on_zerogpu(monkeypatch, service)
    steps = []
    zero = run(ZeroGpuStudyExecutor(service.lm, on_step=steps.append), RunStore(tmp_path / "zero"))
    assert zero.run_id == here.run_id  # the same study, model and settings: the same run
    assert_same_batches(RunStore(tmp_path / "here"), here.run_id, RunStore(tmp_path / "zero"), zero.run_id)
    assert len(harness.CALLS) == 4 and all(c.exitcode == 0 for c in harness.CALLS)  # one fresh child a batch
    assert len({c.pid for c in harness.CALLS}) == 4 and len(steps) == 4 * 4


def test_an_aborted_batch_keeps_the_batches_before_it_and_the_study_resumes(service, tmp_path, monkeypatch):
    here = run(service.lm, RunStore(tmp_path / "here"))
    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(gpu_executor, "_duration_s", [4])  # PETRI_GPU_DURATION_S=4, as create_app passes it on
    real = gpu_executor.sample_batch

    calls = tmp_path / "calls"  # each call's child is fresh: they count in a file

    def third_stalls(lm, job, on_step=None, cancel=None):
        with calls.open("a") as f:
            f.write(job.key + "\n")
        if len(calls.read_text().split()) == 3:  # the third batch to run, whichever the runner picks
            time.sleep(60)
        return real(lm, job, on_step, cancel)

    monkeypatch.setattr(gpu_executor, "sample_batch", third_stalls)
    store = RunStore(tmp_path / "zero")
    with pytest.raises(GpuAborted, match="2 of 4 batches to compute finished"):
        run(ZeroGpuStudyExecutor(service.lm), store)
    ran = calls.read_text().split()
    assert sorted(k for k, _, _ in store.load_events(here.run_id)) == sorted(ran[:2])
    assert len(harness.CALLS) == 3 and harness.CALLS[2].aborted and not any(c.aborted for c in harness.CALLS[:2])
    monkeypatch.setattr(gpu_executor, "sample_batch", real)
    again = run(ZeroGpuStudyExecutor(service.lm), store)
    assert (again.resumed, again.computed) == (2, 2) and len(harness.CALLS) == 5
    assert_same_batches(RunStore(tmp_path / "here"), here.run_id, store, again.run_id)
