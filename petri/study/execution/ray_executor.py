"""A study's batches on a Ray cluster: one model-holding actor per worker, scheduled dynamically.

Each worker is a Ray actor that loads its own model once from a :class:`ModelSpec` (on GPUs one
actor per GPU, ``num_gpus=1``; on CPUs one actor per ``threads`` CPUs). The driver keeps every
worker busy with one batch at a time and gives a worker its next batch the moment its last one
lands, so a slow worker never holds the others back. Trajectories come back to the driver, which
alone writes the run store (:func:`petri.study.execution.runner.run_study` commits each as it lands).

Faults: a worker that dies mid-batch (its process, its node) is dropped and its batch goes back to
the head of the queue for another worker; a batch lands at most once (the driver forgets a dead
worker's task). When every worker is gone the run stops with :class:`WorkersLostError`; what landed
is stored, and the same command resumes.

Ray is optional: it is imported only here, inside functions, so ``petri`` imports without it.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from petri.core.cancel import CancelToken
from petri.core.dish import Dish
from petri.core.settings import FamilySettings
from petri.core.trajectory import Trajectory
from petri.engine.base import SamplingModel
from petri.study.execution.executors import (
    BatchJob,
    BatchLanded,
    ExecutorError,
    ModelFacts,
    ModelSpec,
    StudyExecutor,
    check_layouts,
    sample_batch,
)

log = logging.getLogger(__name__)

RAY_INSTALL_HINT = 'pip install "concept-petri-dish[ray]" (or pip install "ray>=2.40")'
DEFAULT_PORT = 6379
CLIENT_PORT = 10001
#: Seconds between the driver's looks at a cancel token while batches run on the workers.
CANCEL_POLL_S = 0.2


class WorkersLostError(ExecutorError):
    """Every worker died before the study finished (the landed batches are stored)."""


def import_ray():
    """The ``ray`` module, or :class:`ExecutorError` saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ExecutorError(f"--ray needs Ray, which is not installed here ({err}); install it with {RAY_INSTALL_HINT}") from None
    return ray


class _BatchWorker:
    """The actor: one loaded model, sampling one batch per call (made remote in :class:`RayExecutor`)."""

    def __init__(self, spec: ModelSpec):
        self.lm, self.load_error = None, None
        try:
            self.lm = spec.load()
        except Exception as err:  # noqa: BLE001 - raised by facts(), so the driver sees the model's own error
            self.load_error = err

    def facts(self) -> tuple[ModelFacts, str]:
        if self.load_error is not None:
            raise self.load_error
        return ModelFacts.of(cast(SamplingModel, self.lm)), socket.gethostname()  # loaded: load_error is None

    def check_layouts(self, dishes: Sequence[Dish], settings: FamilySettings) -> None:
        check_layouts(cast(SamplingModel, self.lm), dishes, settings)  # the driver asked facts() first

    def sample(self, job: BatchJob) -> Trajectory:
        return sample_batch(cast(SamplingModel, self.lm), job)  # the driver asked facts() first


def _host_port(address: str) -> tuple[str, int]:
    """(host, port) of a Ray address: ``HOST[:PORT]`` (GCS, port 6379) or ``ray://HOST[:PORT]`` (client, 10001)."""
    client = address.startswith("ray://")
    rest = address[len("ray://"):] if client else address
    host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    try:
        return host.strip("[]"), int(port) if port else (CLIENT_PORT if client else DEFAULT_PORT)
    except ValueError:
        raise ValueError(f"--ray {address}: not a Ray address (HOST:PORT, ray://HOST:PORT, auto, or local)") from None


def connect(ray, address: str, timeout_s: float = 5.0, num_cpus: int | None = None) -> bool:
    """Join (or start) the Ray cluster ``address`` names; True when this call started Ray here.

    ``"local"`` starts a private Ray on this machine (``num_cpus``: its CPU count by default),
    ``"auto"`` joins the cluster started here with ``ray start`` (or ``RAY_ADDRESS``), anything else
    is a head node's ``HOST:PORT`` (or ``ray://HOST:PORT``), checked to answer within ``timeout_s``
    before Ray is asked to join. A Ray already initialised in this process is used as it is.
    """
    if address not in ("local", "auto"):
        host, port = _host_port(address)
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as err:
            raise ExecutorError(f"--ray {address}: no Ray cluster answers at {host}:{port} ({err}); start its head "
                                "with `ray start --head` or check the address") from None
    if ray.is_initialized():
        return False
    quiet = {"logging_level": logging.WARNING}
    if address == "local":
        ray.init(num_cpus=num_cpus, include_dashboard=False, **quiet)
        return True
    try:
        ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError) as err:
        where = "no running Ray cluster on this machine (start one with `ray start --head` or set RAY_ADDRESS)" \
            if address == "auto" else f"could not join the cluster ({err})"
        raise ExecutorError(f"--ray {address}: {where}") from None
    return True


def plan_workers(resources: dict[str, float], device: str, workers: int | None, cpus_per_worker: int) -> tuple[str, int]:
    """(device every worker uses, worker count) for a cluster offering ``resources`` (Ray's
    ``cluster_resources()``). ``device`` ``auto`` means ``cuda`` when the cluster has GPUs, else
    ``cpu``; ``workers`` (>= 1) None means as many as it offers. Raises ``ValueError`` naming the option."""
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    wanted = device.strip().lower()
    if wanted == "auto":
        wanted = "cuda" if gpus else "cpu"
    if wanted.startswith("cuda"):
        if not gpus:
            raise ValueError(f"--device {device}: the Ray cluster has no GPUs (it offers {cpus} CPUs); use --device cpu")
        if workers is not None and workers > gpus:
            raise ValueError(f"--workers {workers}: the Ray cluster offers {gpus} GPUs (one worker per GPU)")
        return "cuda", workers or gpus
    capacity = cpus // cpus_per_worker
    if capacity < 1 or (workers is not None and workers > capacity):
        raise ValueError(f"--workers {workers if workers is not None else 1}: the Ray cluster offers {cpus} CPUs and each "
                         f"worker takes {cpus_per_worker} (--threads), room for {capacity} workers")
    return wanted, workers or capacity


class RayExecutor(StudyExecutor):
    """``workers`` model-holding Ray actors on the cluster ``address`` names (see :func:`connect`).

    Everything that can be refused is refused in the constructor, before any sampling: Ray missing,
    the cluster unreachable, a worker count it cannot hold, a GPU device on a cluster without GPUs,
    a model the workers cannot load, workers that load different models or device kinds.
    Attributes: ``delivered`` (batches per worker in the last run), ``reruns`` ((batch key, dead worker), all runs).
    """

    def __init__(self, spec: ModelSpec, address: str = "local", workers: int | None = None, *,
                 ready_timeout_s: float = 1800.0, local_cpus: int | None = None):
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
        self.ray = ray = import_ray()
        self._owns_ray = connect(ray, address, num_cpus=local_cpus)
        try:
            cpus_per_worker = spec.threads or 1
            device, count = plan_workers(ray.cluster_resources(), spec.device, workers, cpus_per_worker)
            gpu = device == "cuda"
            remote = ray.remote(_BatchWorker).options(
                num_gpus=1 if gpu else 0, num_cpus=1 if gpu else cpus_per_worker, max_restarts=0, max_task_retries=0
            )
            self.spec = replace(spec, device=device)
            self.actors: dict[str, Any] = {f"w{i}": remote.remote(self.spec) for i in range(count)}
            self.name = f"ray ({count} workers on {device})"
            self.hosts: dict[str, str] = {}
            self._facts = self._gather_facts(ready_timeout_s)
        except BaseException:
            self.close()
            raise
        self.delivered: dict[str, int] = {}
        self.reruns: list[tuple[str, str]] = []

    def _get(self, refs, timeout: float | None = None):
        """``ray.get`` that raises a worker's own exception (e.g. a LayoutError) rather than Ray's wrapper."""
        try:
            return self.ray.get(refs, timeout=timeout)
        except self.ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise

    def _gather_facts(self, timeout_s: float) -> ModelFacts:
        names = list(self.actors)
        try:
            answers = self._get([self.actors[n].facts.remote() for n in names], timeout=timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            raise ExecutorError(f"--workers {len(names)}: the workers did not load the model within {timeout_s:.0f} s "
                                "(are the cluster's resources taken? `ray status` shows them)") from None
        self.hosts = {n: host for n, (_, host) in zip(names, answers)}
        kinds = {(f.model_id, f.fingerprint, f.device_type) for f, _ in answers}
        if len(kinds) > 1:
            raise ExecutorError(f"--ray: the workers loaded different models or device kinds {sorted(kinds)}; "
                                "a study's numbers need one (install the same checkpoint on every node)")
        return answers[0][0]

    def facts(self) -> ModelFacts:
        return self._facts

    def check_layouts(self, dishes: Sequence[Dish], settings: FamilySettings) -> None:
        first = next(iter(self.actors.values()))
        self._get(first.check_layouts.remote(list(dishes), settings))

    def run(self, jobs: Sequence[BatchJob], on_landed: BatchLanded, cancel: CancelToken | None = None) -> None:
        """Keep every worker on one batch; hand each landed trajectory to ``on_landed`` (this thread).
        ``cancel`` is looked at every :data:`CANCEL_POLL_S` seconds; the batches in flight are then
        cancelled on the workers."""
        ray = self.ray
        self.delivered = {}
        queue: deque[BatchJob] = deque(jobs)
        idle = deque(self.actors)
        pending: dict[Any, tuple[str, BatchJob]] = {}

        def dispatch() -> None:
            while idle and queue:
                name = idle.popleft()
                job = queue.popleft()
                pending[self.actors[name].sample.remote(job)] = (name, job)

        try:
            while queue or pending:
                dispatch()
                if not pending:
                    raise WorkersLostError(f"every Ray worker died; {len(queue)} batches were not sampled (the landed ones "
                                           "are stored: rerun the same command to resume)")
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=CANCEL_POLL_S)
                if cancel is not None:
                    cancel.check()
                if not ready:
                    continue
                [ref] = ready
                name, job = pending.pop(ref)
                try:
                    traj = self._get(ref)
                except ray.exceptions.RayActorError as err:
                    self._drop(name, job, err)
                    queue.appendleft(job)
                    continue
                idle.append(name)
                dispatch()  # the freed worker starts its next batch before the driver commits this one
                self.delivered[name] = self.delivered.get(name, 0) + 1
                on_landed(job, traj, name)
        finally:
            for ref in pending:  # an aborted run: stop what is queued on the workers
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - best effort; the refs are forgotten either way
                    pass

    def _drop(self, name: str, job: BatchJob, err: BaseException) -> None:
        self.actors.pop(name, None)
        self.reruns.append((job.key, name))
        log.warning("Ray worker %s (%s) died during batch %s (%s); the batch goes to another worker",
                    name, self.hosts.get(name, "?"), job.key, type(err).__name__)

    def kill_worker(self, name: str) -> None:
        """Kill one worker now (what a lost node does; tests use it)."""
        self.ray.kill(self.actors[name], no_restart=True)

    def close(self) -> None:
        """Kill the workers; shut Ray down when this executor started it."""
        for actor in getattr(self, "actors", {}).values():
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.actors = {}
        if self._owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
            self._owns_ray = False
