"""The job queue (no model): order, one at a time, cancel, bound, events, shutdown, persistence;
and the samplers' cancellation point (torch, and the service's study and seed jobs)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from petri.app.jobs import JobQueue, QueueFull
from petri.app.service import PetriService, SeedEvent
from petri.core.cancel import Cancelled, CancelToken
from petri.core.dish import Dish
from petri.core.trajectory import SamplerSettings
from petri.core.watch import Watch
from petri.runs.store import RunStore
from petri.study.plan import StudyPlan
from petri.study.schema import study_from_dict
from study_support import study_dict

DEADLINE_S = 30


def wait_until(condition, what: str, timeout: float = DEADLINE_S) -> None:
    """Poll ``condition`` (no fixed sleep decides an outcome) until true or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.fixture()
def store(tmp_path):
    s = RunStore(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture()
def queue(store):
    q = JobQueue(store, threading.Lock(), max_queued=3)
    yield q
    q.shutdown(timeout=5)


def gated(log: list, name: str, gate: threading.Event | None = None):
    """Work that logs its start and end and (optionally) waits for ``gate`` while checking its token."""

    def work(ctx):
        log.append(("start", name))
        while gate is not None and not gate.wait(0.01):
            ctx.cancel.check()
        log.append(("end", name))
        return name

    return work


def test_jobs_run_in_order_one_at_a_time(queue):
    log: list = []
    jobs = [queue.submit("seed", gated(log, f"j{i}")) for i in range(3)]
    for job in jobs:
        assert queue.wait(job.job_id, DEADLINE_S).status == "done"
    assert log == [("start", "j0"), ("end", "j0"), ("start", "j1"), ("end", "j1"), ("start", "j2"), ("end", "j2")]
    assert [j.result for j in jobs] == ["j0", "j1", "j2"]
    assert all(j.started is not None and j.finished is not None for j in jobs)


def test_a_queued_job_cancelled_never_starts_and_a_running_one_stops(queue):
    log: list = []
    gate = threading.Event()
    first = queue.submit("study", gated(log, "first", gate))
    second = queue.submit("seed", gated(log, "second"))
    wait_until(lambda: first.status == "running", "the first job to run")
    assert queue.cancel(second.job_id).status == "cancelled"  # final at once, while still queued
    assert queue.cancel(second.job_id).status == "cancelled"  # idempotent
    queue.cancel(first.job_id)
    assert queue.wait(first.job_id, DEADLINE_S).status == "cancelled"
    assert log == [("start", "first")]  # the running one stopped inside its work; the queued one never began
    assert second.started is None


def test_a_full_queue_refuses_and_the_running_job_does_not_count(queue):
    gate = threading.Event()
    running = queue.submit("seed", gated([], "running", gate))
    wait_until(lambda: queue.current is running, "the worker to take the first job")
    waiting = [queue.submit("seed", gated([], f"w{i}")) for i in range(queue.max_queued)]
    with pytest.raises(QueueFull, match="3 jobs waiting"):
        queue.submit("seed", gated([], "one too many"))
    gate.set()
    assert all(queue.wait(j.job_id, DEADLINE_S).status == "done" for j in [running, *waiting])


def test_a_failing_job_is_reported_and_the_worker_goes_on(queue):
    def broken(ctx):
        raise ValueError("no such concept")

    bad = queue.submit("seed", broken)
    good = queue.submit("seed", gated([], "after"))
    assert queue.wait(bad.job_id, DEADLINE_S).status == "failed"
    assert bad.error == "ValueError: no such concept"
    assert queue.wait(good.job_id, DEADLINE_S).status == "done"


def test_events_are_ordered_and_a_late_subscriber_starts_from_now(queue):
    gate = threading.Event()

    def counting(ctx):
        for done in range(1, 4):
            gate.wait(DEADLINE_S)
            ctx.progress(done, 3, "batch")
        return "ok"

    blocker_gate = threading.Event()
    blocker = queue.submit("seed", gated([], "blocker", blocker_gate))
    job = queue.submit("study", counting)
    early: list = []
    queue.subscribe(job.job_id, early.append)  # while queued
    blocker_gate.set()
    wait_until(lambda: job.status == "running", "the job to start")
    gate.set()
    queue.wait(job.job_id, DEADLINE_S)
    kinds = [e["event"] for e in early]
    assert kinds[0] == "state" and early[0]["job"]["status"] == "queued"
    assert kinds[-1] == "end" and early[-1]["job"]["status"] == "done" and kinds.count("end") == 1
    assert "status" in kinds and kinds.index("status") < kinds.index("progress")
    dones = [e["job"]["progress"]["done"] for e in early if e["event"] == "progress"]
    assert dones == [1, 2, 3]
    late: list = []
    queue.subscribe(job.job_id, late.append)
    assert [e["event"] for e in late] == ["state", "end"] and late[0]["job"]["progress"] == {"done": 3, "total": 3, "unit": "batch"}
    assert queue.wait(blocker.job_id, 1).status == "done"


def test_shutdown_interrupts_the_running_job_and_the_queue_and_stores_it(queue, store):
    gate = threading.Event()
    running = queue.submit("study", gated([], "long", gate))
    queued = queue.submit("seed", gated([], "later"))
    wait_until(lambda: running.status == "running", "the first job to run")
    queue.shutdown(timeout=DEADLINE_S)
    assert running.status == "interrupted" and queued.status == "interrupted"
    assert {j["job_id"]: j["status"] for j in store.list_jobs(any_owner=True)} == {
        running.job_id: "interrupted", queued.job_id: "interrupted"}
    with pytest.raises(RuntimeError, match="shutting down"):
        queue.submit("seed", gated([], "too late"))


def test_a_crash_leaves_running_work_that_the_next_start_marks_interrupted(store):
    store.create_run("ab" * 16, "study", "m", {})
    store.save_job({"job_id": "cd" * 16, "kind": "study", "status": "running", "created": "2026-11-29T00:00:00",
                    "progress": {"done": 1, "total": 4, "unit": "batch"}, "owner": None})
    store.save_job({"job_id": "ef" * 16, "kind": "seed", "status": "done", "created": "2026-11-29T00:00:01",
                    "progress": {"done": 4, "total": 4, "unit": "step"}, "owner": None})
    assert store.mark_unfinished_interrupted() == (1, 1)
    assert store.get_run("ab" * 16)["status"] == "interrupted"
    assert store.get_job("cd" * 16)["status"] == "interrupted" and store.get_job("ef" * 16)["status"] == "done"
    assert store.get_job("cd" * 16)["progress"] == {"done": 1, "total": 4, "unit": "batch"}


def test_a_stopped_run_is_marked_by_what_stopped_it():
    from petri.study.execution.runner import stopped_status

    assert stopped_status(Cancelled("cancelled")) == "cancelled"
    assert stopped_status(Cancelled("interrupted")) == "interrupted"
    assert stopped_status(KeyboardInterrupt()) == "interrupted"
    assert stopped_status(RuntimeError("disk full")) == "failed"


# ------------------------------------------------------------------------------ with a model
def counted_forwards(lm) -> list[int]:
    """Count the model's forward calls (one per denoising step after the encoder)."""
    calls: list[int] = []
    lm.model.register_forward_pre_hook(lambda module, args: calls.append(1))
    return calls


def test_the_torch_sampler_stops_within_one_step_of_a_cancel(tmp_path):
    from petri.engine.seeding import seed_dish
    from petri.engine.torch.tiny import tiny_random_model

    lm = tiny_random_model(canvas_length=16)
    calls = counted_forwards(lm)
    token = CancelToken()

    def cancel_at_step_two(step):
        if step.index == 2:
            token.cancel("cancelled")

    with pytest.raises(Cancelled) as stop:
        seed_dish(lm, Dish(("order", "person"), "x"), 3, SamplerSettings(max_denoising_steps=50), seed=1,
                  on_step=cancel_at_step_two, cancel=token)
    assert stop.value.reason == "cancelled"
    assert len(calls) == 3  # steps 0, 1, 2 ran; the check before step 3 stopped it


STUDY = study_dict("job-study", "Job study", templates=1)
SETTINGS = SamplerSettings(max_denoising_steps=6)


def test_a_cancelled_study_job_keeps_its_batches_and_resumes_to_the_same_numbers(tiny_lm, tmp_path):
    study = study_from_dict(STUDY)
    service = PetriService(tiny_lm, RunStore(tmp_path / "a"))
    batches: list = []
    job = service.submit_study(StudyPlan(study, 2, 5, SETTINGS), watch=Watch(progress=batches.append))
    events: list = []
    service.jobs.subscribe(job.job_id, events.append)

    # cancel as soon as the first batch is stored
    def first_batch_stored():
        return job.done >= 1

    wait_until(first_batch_stored, "the first batch")
    service.jobs.cancel(job.job_id)
    assert service.jobs.wait(job.job_id, DEADLINE_S).status == "cancelled"
    stored = service.store.completed_events(job.run_id)
    assert 1 <= len(stored) < 4 and service.store.get_run(job.run_id)["status"] == "cancelled"
    assert [p.done for p in batches] == list(range(1, len(stored) + 1))  # the UI's per-batch hook

    again = service.submit_study(StudyPlan(study, 2, 5, SETTINGS))
    assert service.jobs.wait(again.job_id, DEADLINE_S).status == "done"
    assert again.run_id == job.run_id and again.result.resumed == len(stored) and again.result.computed == 4 - len(stored)

    fresh = PetriService(tiny_lm, RunStore(tmp_path / "b")).run_study(StudyPlan(study, samples=2, seed=5, settings=SETTINGS))
    for a, b in zip(again.result.batches, fresh.batches):
        assert a.key == b.key
        np.testing.assert_array_equal(a.trajectory.argmax, b.trajectory.argmax)
        np.testing.assert_array_equal(a.trajectory.final_ids, b.trajectory.final_ids)
    service.shutdown()


def test_a_seed_job_counts_steps_and_equals_the_synchronous_seed(service):
    events = [SeedEvent(Dish(("order", "person"), "A customer ordered."), "benign"),
              SeedEvent(Dish(("order", "person"), "Only 90 in stock."), "contradictory")]
    settings = SamplerSettings(max_denoising_steps=5, stability_threshold=None, confidence_threshold=None)
    live: list = []
    job = service.submit_seed(service.plan(events, 3, settings, seed=9), watch=Watch(on_step=lambda step: live.append(step.argmax)))
    seen: list = []
    service.jobs.subscribe(job.job_id, seen.append)
    assert service.jobs.wait(job.job_id, DEADLINE_S).status == "done"
    steps = [e["job"]["progress"]["done"] for e in seen if e["event"] == "progress"]
    assert steps == sorted(steps) and steps[-1] == 10 and job.total == 10 and job.unit == "step"
    sync = service.seed(service.plan(events, 3, settings, seed=9))
    assert len(live) == 10  # the UI's live view: every step's raw argmax, through the job
    np.testing.assert_array_equal(np.stack(live[:5], axis=1), job.result.trajectories[0].argmax)
    for a, b in zip(job.result.trajectories, sync.trajectories):
        np.testing.assert_array_equal(a.argmax, b.argmax)
        np.testing.assert_array_equal(a.accepted, b.accepted)
    assert service.store.get_run(job.run_id)["status"] == "done"


def test_acquire_or_cancel_waits_times_out_and_sees_a_cancel_while_waiting():
    from petri.core.cancel import acquire_or_cancel

    lock = threading.Lock()
    assert acquire_or_cancel(lock, None, timeout=0)  # free: taken at once, even with no time to wait
    assert not acquire_or_cancel(lock, CancelToken(), timeout=0.25)  # held: False once the time is up
    token = CancelToken()
    threading.Timer(0.2, token.cancel, args=("interrupted",)).start()
    with pytest.raises(Cancelled) as stopped:
        acquire_or_cancel(lock, token, timeout=10)  # the cancel ends the wait long before the limit
    assert stopped.value.reason == "interrupted"
    threading.Timer(0.2, lock.release).start()
    assert acquire_or_cancel(lock, CancelToken(), timeout=5)  # released while waiting: taken
    assert lock.locked()
