"""The one object that owns the loaded model, the run store, the job queue and the lock that lets
one model job run at a time. The HTTP routes, the Gradio UI and the CLI are thin layers over it.

Two ways in: a synchronous call (:meth:`PetriService.seed`, :meth:`PetriService.run_study`) that
takes the lock itself, and a job (:meth:`PetriService.submit_seed`, :meth:`PetriService.submit_study`)
that the job queue runs in order. Both take the run planned at the edge (a
:class:`~petri.core.plan.SeedPlan`, :class:`~petri.study.plan.StudyPlan` or
:class:`~petri.core.plan.ProbePlan`) and a :class:`~petri.core.watch.Watch` (live steps, progress, a
cancel token), keyword-only beside ``owner`` and ``wait_s``, which are the service's own (who may
read the run; how long a synchronous call waits for the lock). A synchronous call is cancelled
through its watch's token, a job through the queue; :meth:`PetriService.shutdown` stops all of it
(``interrupted``, resumable).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import cast

from petri.app import probe as probing
from petri.app.jobs import Job, JobContext, JobQueue, recorded_run
from petri.app.runs_view import RunsView
from petri.core.cancel import CancelToken, acquire_or_cancel
from petri.core.plan import ProbePlan, SeedEvent, SeedPlan  # noqa: F401  (SeedEvent: read from here by the edges)
from petri.core.settings import FamilySettings
from petri.core.trajectory import Trajectory
from petri.core.watch import NO_WATCH, Watch
from petri.engine.base import SamplingModel
from petri.engine.seeding import plan_seed, sample_planned
from petri.runs.store import RunStore
from petri.study.execution.executors import StudyExecutor
from petri.study.execution.runner import StudyProgress, StudyResult, run_study
from petri.study.plan import StudyPlan


def job_watch(watch: Watch) -> Watch:
    """``watch`` for a queued job, which is stopped through its queue (:meth:`petri.app.jobs.JobQueue.cancel`,
    ``DELETE /api/jobs/{id}``) and its own token: a watch that brings a ``cancel`` is refused, naming it."""
    if watch.cancel is not None:
        raise ValueError("watch.cancel: a queued job is cancelled through the job queue, not a token of the caller's")
    return watch


class BusyError(RuntimeError):
    """Another model job holds the lock and did not finish within the wait allowed."""


@dataclass
class SeedResult:
    run_id: str
    trajectories: list[Trajectory]
    groups: list[str | None]
    wall_s: float


class PetriService(RunsView):
    """Loaded model + run store + job queue + a lock (one model job at a time); what the edges read
    (stored runs and jobs, the model's facts) is :class:`~petri.app.runs_view.RunsView`'s.

    Args:
        busy_wait_s: how long a synchronous call waits for the lock before :class:`BusyError`.
        max_queued_jobs: jobs that may wait in the queue at once (:class:`~petri.app.jobs.QueueFull`).
    """

    def __init__(self, lm: SamplingModel, store: RunStore, busy_wait_s: float = 0.0, max_queued_jobs: int = 16):
        self.lm = lm
        self.store = store
        self.busy_wait_s = busy_wait_s
        self._lock = threading.Lock()
        self.jobs = JobQueue(store, self._lock, max_queued=max_queued_jobs)
        self._active: set[CancelToken] = set()
        self._active_lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @contextmanager
    def exclusive(self, wait_s: float | None = None, cancel: CancelToken | None = None) -> Iterator[None]:
        """Hold the model for one job; raise :class:`BusyError` if it stays taken for ``wait_s``
        (or :class:`~petri.core.cancel.Cancelled` if ``cancel`` is cancelled while waiting)."""
        wait = self.busy_wait_s if wait_s is None else wait_s
        if not acquire_or_cancel(self._lock, cancel, timeout=wait):
            raise BusyError(f"a model job is already running (waited {wait:.0f} s); try again later")
        try:
            yield
        finally:
            self._lock.release()

    @contextmanager
    def cancellable(self, token: CancelToken | None = None) -> Iterator[CancelToken]:
        """A token for synchronous work that :meth:`shutdown` can stop (registered while in use)."""
        token = token or CancelToken()
        with self._active_lock:
            self._active.add(token)
        try:
            yield token
        finally:
            with self._active_lock:
                self._active.discard(token)

    # ------------------------------------------------------------------------------ seeding
    def plan(self, events: Sequence[SeedEvent], n_samples: int, settings: FamilySettings | None = None,
             seed: int = 0) -> SeedPlan:
        """``events`` planned once for this service's model (:func:`petri.engine.seeding.plan_seed`;
        ``settings`` ``None``: the model's defaults), under a new run id: what :meth:`seed` and
        :meth:`submit_seed` sample. Raises :class:`~petri.core.dish.LayoutError` or ``ValueError``."""
        return plan_seed(self.lm, events, n_samples, settings, seed, run_id=uuid.uuid4().hex)

    def seed(self, plan: SeedPlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
             owner: str | None = None) -> SeedResult:
        """Sample every event of ``plan`` (one batch per event), store each as it finishes, return
        them all; ``watch`` sees each step and each event's start and may cancel it. ``owner`` (a
        token hash) may read the run on a public server."""
        with self.cancellable(watch.cancel) as token, self.exclusive(wait_s, token):
            return self._seed(plan, watch=watch.cancelled_by(token), owner=owner)

    def _seed(self, plan: SeedPlan, *, watch: Watch, owner: str | None, started_run=None, event_done=None) -> SeedResult:
        """:meth:`seed`'s work, the lock already held; ``watch.progress(index)`` before each event's first step."""
        if plan.run_id is None:
            plan = replace(plan, run_id=uuid.uuid4().hex)
        run_id = cast(str, plan.run_id)  # set just above
        started = time.perf_counter()
        self.start_seed_run(plan, owner)
        if started_run is not None:
            started_run(run_id)
        trajectories = []
        with recorded_run(self.store, run_id):
            for index in range(len(plan.events)):
                if watch.progress is not None:
                    watch.progress(index)
                traj = sample_planned(self.lm, plan, index, on_step=watch.on_step, cancel=watch.cancel)
                self.save_seed_event(plan, index, traj)
                trajectories.append(traj)
                if event_done is not None:
                    event_done(index)
        return SeedResult(run_id, trajectories, plan.groups, time.perf_counter() - started)

    def start_seed_run(self, plan: SeedPlan, owner: str | None = None) -> None:
        """Store ``plan`` (its ``run_id`` set) as a new seed run of this model, its events to come
        (:meth:`save_seed_event`); ``owner`` (a token hash) may read it on a public server."""
        self.store.create_run(cast(str, plan.run_id), "seed", self.lm.model_id, plan.stored_request(), owner)

    def save_seed_event(self, plan: SeedPlan, index: int, traj: Trajectory) -> None:
        """Store event ``index`` of ``plan``'s run, sampled as ``traj``, under its key and group."""
        self.store.save_event(cast(str, plan.run_id), index, f"event{index}", traj, plan.events[index].event.group)

    def submit_seed(self, plan: SeedPlan, *, owner: str | None = None, watch: Watch = NO_WATCH) -> Job:
        """Queue a seed as a job; its progress counts denoising steps (``events × max steps`` at most:
        samples that stop early finish their event sooner). The job's result is a :class:`SeedResult`.
        ``watch`` (in-process callers such as the UI) sees each step (a :class:`~petri.engine.base.LiveStep`),
        as in :meth:`seed`, and ``watch.progress(index)`` on the job's thread before event ``index``'s
        first step, so the steps that follow belong to that event. The job is cancelled through the
        queue (:func:`job_watch`)."""
        watch = job_watch(watch)
        max_steps = plan.settings.max_denoising_steps

        def work(ctx: JobContext) -> SeedResult:
            total = len(plan.events) * max_steps
            steps = [0]

            def step() -> None:
                steps[0] += 1
                ctx.progress(min(steps[0], total), total, "step")

            def event_done(index: int) -> None:
                steps[0] = (index + 1) * max_steps
                ctx.progress(steps[0], total, "step")

            ctx.progress(0, total, "step")
            ctx.cancel.heartbeat = step
            return self._seed(plan, watch=watch.cancelled_by(ctx.cancel), owner=owner, started_run=ctx.set_run_id,
                              event_done=event_done)

        return self.jobs.submit("seed", work, owner)

    # ------------------------------------------------------------------------------ studies
    def run_study(self, plan: StudyPlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
                  owner: str | None = None) -> StudyResult:
        """:func:`petri.study.execution.runner.run_study` on this service's model and store, holding the one-job
        lock for the whole study (raises :class:`BusyError` if another job holds it). Rerunning the
        same plan resumes from the store."""
        with self.cancellable(watch.cancel) as token, self.exclusive(wait_s, token):
            return self._study(plan, watch=watch.cancelled_by(token), owner=owner)

    def run_study_on(self, executor: StudyExecutor, plan: StudyPlan, *, watch: Watch = NO_WATCH,
                     owner: str | None = None) -> StudyResult:
        """:meth:`run_study` with every batch sampled by ``executor`` (on ZeroGPU one ``spaces.GPU`` call a
        batch: :class:`petri.web.gpu_executor.ZeroGpuStudyExecutor`), stored in this service's store,
        without the one-job lock (each of those calls gets a GPU of its own)."""
        with self.cancellable(watch.cancel) as token:
            return self._study(plan, watch=watch.cancelled_by(token), owner=owner, executor=executor)

    def _study(self, plan: StudyPlan, *, watch: Watch, owner: str | None, started_run=None,
               executor: StudyExecutor | None = None) -> StudyResult:
        """:meth:`run_study`'s work, the lock already held (or not needed: ``executor``)."""

        def registered(run_id: str) -> None:
            if owner is not None:
                self.store.add_run_owner(run_id, owner)
            if started_run is not None:
                started_run(run_id)

        return run_study(executor or self.lm, plan, self.store, watch=watch, on_run_id=registered)

    def submit_study(self, plan: StudyPlan, *, owner: str | None = None, watch: Watch = NO_WATCH) -> Job:
        """Queue a study as a job; its progress counts (event, template) batches, stored ones
        included. The job's result is a :class:`~petri.study.execution.runner.StudyResult`. ``watch.progress``
        (in-process callers such as the UI) also sees each :class:`~petri.study.execution.runner.StudyProgress`.
        The job is cancelled through the queue (:func:`job_watch`)."""
        watch = job_watch(watch)

        def work(ctx: JobContext) -> StudyResult:
            def batch(p: StudyProgress) -> None:
                ctx.progress(p.done, p.total, "batch")
                if watch.progress is not None:
                    watch.progress(p)

            return self._study(plan, watch=replace(watch, progress=batch, cancel=ctx.cancel), owner=owner,
                               started_run=ctx.set_run_id)

        return self.jobs.submit("study", work, owner)

    # ------------------------------------------------------------------------------ probe
    def probe(self, plan: ProbePlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
              owner: str | None = None) -> probing.ProbeRun:
        """One slot read of a :class:`~petri.core.plan.ProbePlan`, stored as a ``probe`` run
        (:func:`petri.app.probe.probe`)."""
        return probing.probe(self, plan, watch=watch, wait_s=wait_s, owner=owner)

    def submit_probe_eval(self, labelled, settings: probing.EvalSettings | None = None, owner: str | None = None,
                          on_item: Callable[[int, int], None] | None = None) -> Job:
        """Queue a labelled set's evaluation as a ``probe-eval`` job (:func:`petri.app.probe.submit_probe_eval`)."""
        return probing.submit_probe_eval(self, labelled, settings or probing.EvalSettings(), owner, on_item)

    # ------------------------------------------------------------------------------ shutdown
    def shutdown(self, timeout: float = 8.0) -> None:
        """Stop everything for a process that exits: queued jobs never start, the running job and
        every synchronous call stop at their next step, all marked ``interrupted`` (resumable)."""
        self.begin_shutdown()
        self.jobs.shutdown(timeout)

    def begin_shutdown(self) -> None:
        """The non-blocking half of :meth:`shutdown` (for a signal handler)."""
        self.jobs.begin_shutdown()
        with self._active_lock:
            for token in self._active:
                token.cancel("interrupted")
