"""Long work as jobs: submitted, queued, run one at a time on the one model, watched, cancelled.

A job moves ``queued → running → done | failed | cancelled | interrupted``. The queue is bounded
(:class:`QueueFull` when it holds ``max_queued`` jobs waiting); one worker thread runs the jobs in
order, each while holding the model lock, so they never overlap with each other or with anything
else that takes the lock. Every change is published to subscribers (the HTTP event stream, the UI)
and written to the run store, so a job outlives the process that ran it: a server that stops marks
its running and queued jobs ``interrupted``, and one that starts after a crash does the same to
what the crash left (:meth:`petri.runs.store.RunStore.mark_unfinished_interrupted`).

Cancelling is a :class:`~petri.core.cancel.CancelToken` the work checks once per denoising step: a
queued job never starts, a running one stops within one step. What a study stored before it
stopped stays stored, so running it again resumes with identical numbers.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from petri.core.cancel import Cancelled, CancelToken, acquire_or_cancel
from petri.runs.store import RunStore, StoreError
from petri.study.execution.runner import stopped_status

STATUSES = ("queued", "running", "done", "failed", "cancelled", "interrupted")
FINAL = frozenset({"done", "failed", "cancelled", "interrupted"})

#: An event a subscriber receives: ``{"event": "state" | "progress" | "status" | "end", "job": {...}}``.
JobEvent = dict[str, Any]


class QueueFull(RuntimeError):
    """The job queue already holds its maximum of waiting jobs."""


class JobNotFound(KeyError):
    """No job has this id (for this caller)."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Job:
    """One unit of long work and everything a client may read about it (:meth:`public`).

    ``owner`` is the hash of the token of whoever submitted it on a public server (None locally).
    """

    kind: str
    work: Callable[[JobContext], Any] = field(repr=False)
    owner: str | None = None
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    status: str = "queued"
    done: int = 0
    total: int = 0
    unit: str = ""
    run_id: str | None = None
    error: str | None = None
    created: str = field(default_factory=_now)
    started: str | None = None
    finished: str | None = None
    token: CancelToken = field(default_factory=CancelToken, repr=False)
    result: Any = field(default=None, repr=False)

    def public(self) -> dict[str, Any]:
        """What ``GET /api/jobs/{id}`` shows."""
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "status": self.status,
            "progress": {"done": self.done, "total": self.total, "unit": self.unit},
            "run_id": self.run_id,
            "error": self.error,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
        }


@contextmanager
def recorded_run(store: RunStore, run_id: str) -> Iterator[None]:
    """The work on stored run ``run_id``: the run is finished ``done`` when the body ends, and marked
    with the status its error stands for (``cancelled``, ``interrupted``, ``failed``) when it raises
    (the error goes on; a store that cannot record it, e.g. a full disk, leaves the original error)."""
    try:
        yield
    except BaseException as err:
        try:
            store.finish_run(run_id, stopped_status(err), error=str(err))
        except StoreError:  # the store itself may be what failed: keep the original error
            pass
        raise
    store.finish_run(run_id, "done")


class JobContext:
    """What a job's work receives: its cancel token and the ways to report progress and its run."""

    def __init__(self, queue: JobQueue, job: Job):
        self._queue, self.job = queue, job

    @property
    def cancel(self) -> CancelToken:
        return self.job.token

    def progress(self, done: int, total: int, unit: str) -> None:
        """``done`` of ``total`` ``unit``s (``step`` for a dish, ``batch`` for a study)."""
        self._queue._update(self.job, "progress", done=int(done), total=int(total), unit=unit)

    def set_run_id(self, run_id: str) -> None:
        self._queue._update(self.job, "progress", run_id=run_id)


class JobQueue:
    """A bounded FIFO of jobs and the one worker thread that runs them.

    Args:
        store: where every job's state is written (``None``: memory only).
        model_lock: held while a job runs (the service's one-job lock).
        max_queued: jobs that may wait at once; one more raises :class:`QueueFull`.
        keep: finished jobs kept in memory (older ones are read back from the store).
    """

    def __init__(self, store: RunStore | None, model_lock: threading.Lock, max_queued: int = 16, keep: int = 256):
        if max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {max_queued}")
        self.store, self.model_lock, self.max_queued, self.keep = store, model_lock, max_queued, keep
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._waiting: list[Job] = []
        self._subscribers: dict[str, list[Callable[[JobEvent], object]]] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._worker: threading.Thread | None = None
        self.current: Job | None = None

    # ------------------------------------------------------------------------------- clients
    def submit(self, kind: str, work: Callable[[JobContext], Any], owner: str | None = None) -> Job:
        """Queue ``work`` (called with a :class:`JobContext` in the worker thread); its return
        value becomes ``job.result``. Raises :class:`QueueFull`, or ``RuntimeError`` while stopping."""
        job = Job(kind=kind, work=work, owner=owner)
        with self._cond:
            if self._stopping:
                raise RuntimeError("the server is shutting down; no new jobs are taken")
            if len(self._waiting) >= self.max_queued:
                raise QueueFull(f"the job queue is full ({self.max_queued} jobs waiting)")
            self._jobs[job.job_id] = job
            self._waiting.append(job)
            self._persist(job)
            self._ensure_worker()
            self._cond.notify_all()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._cond:
            return self._jobs.get(job_id)

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._waiting)

    def cancel(self, job_id: str, reason: str = "cancelled") -> Job:
        """Cancel a job (idempotent: a finished job is returned unchanged). A queued job is final at
        once; a running one stops at its next step."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None:
                raise JobNotFound(job_id)
            if job.status in FINAL:
                return job
            job.token.cancel(reason)
            if job in self._waiting:
                self._waiting.remove(job)
                self._finish(job, reason, None)
        return job

    def subscribe(self, job_id: str, callback: Callable[[JobEvent], object]) -> Callable[[], None]:
        """Call ``callback`` with the job's current state now (a ``state`` event; an ``end`` event
        too when it is already final), then with every later event, from the publishing thread.
        Returns the function that unsubscribes."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None:
                raise JobNotFound(job_id)
            callback({"event": "state", "job": job.public()})
            if job.status in FINAL:
                callback({"event": "end", "job": job.public()})
                return lambda: None
            self._subscribers.setdefault(job_id, []).append(callback)

        def unsubscribe() -> None:
            with self._cond:
                listeners = self._subscribers.get(job_id, [])
                if callback in listeners:
                    listeners.remove(callback)

        return unsubscribe

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """Block until the job is final (or ``timeout`` seconds pass); returns the job."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            job = self._jobs[job_id]
            while job.status not in FINAL:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            return job

    def shutdown(self, timeout: float = 8.0) -> None:
        """Stop taking jobs, mark the queued ones ``interrupted``, stop the running one at its next
        step (``interrupted``, resumable) and wait up to ``timeout`` seconds for the worker."""
        self.begin_shutdown()
        worker = self._worker
        if worker is not None:
            worker.join(timeout)

    def begin_shutdown(self) -> None:
        """The non-blocking half of :meth:`shutdown` (safe from a signal handler's thread)."""
        with self._cond:
            self._stopping = True
            for job in list(self._waiting):
                job.token.cancel("interrupted")
                self._finish(job, "interrupted", None)
            self._waiting.clear()
            if self.current is not None:
                self.current.token.cancel("interrupted")
            self._cond.notify_all()

    # ------------------------------------------------------------------------------- worker
    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="petri-jobs", daemon=True)
            self._worker.start()

    def _next(self) -> Job | None:
        with self._cond:
            while not self._waiting and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            job = self._waiting.pop(0)
            self.current = job
            return job

    def _run(self) -> None:
        while (job := self._next()) is not None:
            try:
                with self._holding_model(job.token):
                    self._update(job, "status", status="running", started=_now())
                    result = job.work(JobContext(self, job))
                job.result = result
                self._finish(job, "done", None)
            except Cancelled as stop:
                self._finish(job, stop.reason, None)
            except Exception as err:  # noqa: BLE001 - a failed job is reported, the worker goes on
                self._finish(job, "failed", f"{type(err).__name__}: {err}")
            finally:
                with self._cond:
                    self.current = None

    @contextmanager
    def _holding_model(self, token: CancelToken) -> Iterator[None]:
        """The model lock, waited for in short slices so a cancel during the wait is seen."""
        acquire_or_cancel(self.model_lock, token)
        try:
            token.check()
            yield
        finally:
            self.model_lock.release()

    # ------------------------------------------------------------------------------- state
    def _finish(self, job: Job, status: str, error: str | None) -> None:
        self._update(job, "status", status=status, error=error, finished=_now())
        with self._cond:
            while len(self._jobs) > self.keep:
                oldest = next(iter(self._jobs.values()))
                if oldest.status not in FINAL:
                    break
                self._jobs.popitem(last=False)

    def _update(self, job: Job, kind: str, **changes: Any) -> None:
        with self._cond:
            if kind == "progress" and all(getattr(job, name) == value for name, value in changes.items()):
                return  # nothing new to say
            for name, value in changes.items():
                setattr(job, name, value)
            final = job.status in FINAL
            if kind == "status" or job.unit == "batch" or "run_id" in changes:
                self._persist(job)
            event = {"event": "end" if final else kind, "job": job.public()}
            listeners = list(self._subscribers.get(job.job_id, ()))
            if final:
                self._subscribers.pop(job.job_id, None)
            self._cond.notify_all()
        for listener in listeners:
            listener(event)

    def _persist(self, job: Job) -> None:
        if self.store is not None:
            self.store.save_job({**job.public(), "owner": job.owner})

    def __iter__(self) -> Iterator[Job]:
        with self._cond:
            return iter(list(self._jobs.values()))
