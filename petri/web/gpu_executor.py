"""Where a seed's model work runs: the dedicated-GPU (and CPU) path, or Hugging Face ZeroGPU.

**Dedicated GPU or CPU** (the default): nothing here changes it. The Dish tab queues the seed as a
job of the service's worker thread (``petri-jobs``, :meth:`~petri.app.service.PetriService.submit_seed`)
and ``POST /api/seed`` calls :meth:`~petri.app.service.PetriService.seed` from a worker thread.

**ZeroGPU** (chosen when the platform sets ``SPACES_ZERO_GPU``, read as the ``spaces`` package
reads it: ``1``, ``t`` or ``true``): the model work is one module-level generator,
:func:`seed_frames`, decorated with ``spaces.GPU`` at import (:data:`zerogpu_seed`; off ZeroGPU,
or without the ``spaces`` package, the decorator returns it unchanged). ZeroGPU runs it in a forked
child per call, pickling its argument (the :class:`~petri.core.plan.SeedPlan`) in and every frame
it yields out; the child samples with the model of the service :func:`serve` named (loaded before
the fork). :func:`zerogpu_seed_stream` calls it directly from the caller's thread (the Gradio
handler's, whose request context carries the visitor's quota token), starts no worker thread, takes
no model lock (ZeroGPU gives each call its own GPU), never touches CUDA itself, and stores each
event in the run store as its frame arrives, so an aborted call keeps every finished event. Its
frames are CPU data: each step's :class:`~petri.engine.base.LiveStep` (numpy arrays) and each
finished event's :class:`~petri.core.trajectory.Trajectory`.

A study's batches go the same way, one call per batch (:class:`ZeroGpuStudyExecutor`, for
:func:`petri.study.runner.run_study`), though the Study tab and ``POST /api/study`` do not use it yet.

Not built here (issue 63): studies from the UI and API and probe reads on ZeroGPU, the ``duration`` estimate from
samples, steps and shape (:func:`seed_duration` asks for the seconds :func:`serve` was given:
``PETRI_GPU_DURATION_S``, else ``spaces``' default), the quota-aware UI and the API's Gradio endpoints.
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from petri.app.jobs import recorded_run
from petri.app.service import PetriService, SeedResult
from petri.core.cancel import Cancelled, CancelToken
from petri.core.config import DEFAULT_GPU_DURATION_S, DEFAULT_ZEROGPU_CARD
from petri.core.plan import SeedPlan
from petri.core.trajectory import Trajectory
from petri.engine.base import LiveStep
from petri.engine.seeding import sample_planned
from petri.study.executors import BatchJob, LocalExecutor, sample_batch

if TYPE_CHECKING:  # the web layer imports no torch before a model loads
    from petri.engine.torch.card_placement import CardPlacement

#: The variable the platform sets on a ZeroGPU Space.
ZERO_GPU_ENV = "SPACES_ZERO_GPU"
#: The message of the error ``spaces`` raises in the main process when the GPU child dies or runs
#: past its ``duration``.
ABORTED = "GPU task aborted"
#: Seconds a call asks for unless :func:`serve` is told otherwise (``PETRI_GPU_DURATION_S``): ``spaces``' own default.
DEFAULT_DURATION_S = DEFAULT_GPU_DURATION_S
#: The card size each call asks for unless :func:`serve` is told otherwise (``PETRI_ZEROGPU_SIZE``): the
#: whole card, since the real DiffusionGemma fits no tier on half of one
#: (:func:`petri.engine.torch.card_placement.card_tier`).
DEFAULT_ZEROGPU_SIZE = DEFAULT_ZEROGPU_CARD


def on_zero_gpu() -> bool:
    """Whether this process serves on ZeroGPU (``SPACES_ZERO_GPU`` is ``1``, ``t`` or ``true``)."""
    return os.environ.get(ZERO_GPU_ENV, "").lower() in ("1", "t", "true")


def spaces_gpu(**options: Any) -> Callable[[Callable], Callable]:
    """``spaces.GPU(**options)`` when the ``spaces`` package is installed (itself a no-op off
    ZeroGPU); else the identity. ``spaces`` is imported here, lazily: it is never pinned."""
    try:
        import spaces  # type: ignore[import-not-found]
    except ImportError:
        return lambda fn: fn
    return spaces.GPU(**options)


class GpuAborted(RuntimeError):
    """ZeroGPU stopped the call ("GPU task aborted": its ``duration`` ran out, or the child died);
    ``stored`` events of the run were finished and stored before it stopped."""

    def __init__(self, run_id: str, stored: int, total: int, unit: str = "events"):
        super().__init__(f"the GPU time of this call ran out (ZeroGPU: {ABORTED}); {stored} of {total} "
                         f"{unit} finished and are stored in run {run_id}")
        self.run_id, self.stored, self.total = run_id, stored, total


@dataclass(frozen=True)
class GpuFrame:
    """What the GPU call yields (CPU data only): a denoising ``step`` of event ``event`` (from 0),
    as the live view wants it, or, with ``step`` None, the event's finished ``trajectory``."""

    event: int
    step: LiveStep | None = None
    trajectory: Trajectory | None = None


_served: list[PetriService] = []
#: The seconds a call asks for (:func:`serve` sets it).
_duration_s: list[int] = [DEFAULT_DURATION_S]
#: How the served model is put on the card inside each GPU call (empty: used where it was loaded).
_placement: list[CardPlacement] = []


def serve(service: PetriService, duration_s: int = DEFAULT_DURATION_S, placement: CardPlacement | None = None,
          size: str = DEFAULT_ZEROGPU_SIZE) -> None:
    """Name the service whose model :func:`seed_frames` samples with, the seconds a call asks for
    (``PETRI_GPU_DURATION_S``, :class:`petri.core.config.PetriConfig`), how each call puts that model on
    its GPU (``placement``: :class:`~petri.engine.torch.card_placement.CardPlacement`; on a Space the
    model stays on the CPU in this process and each call places it; ``None`` samples with it where it
    was loaded) and the card size each call asks for (``PETRI_ZEROGPU_SIZE``): called once the model is
    loaded, before any GPU call (a ZeroGPU child is forked from this process and finds it here)."""
    global zerogpu_seed, zerogpu_batch
    _served[:] = [service]
    _duration_s[:] = [duration_s]
    _placement[:] = [placement] if placement is not None else []
    zerogpu_seed = spaces_gpu(duration=seed_duration, size=size)(seed_frames)
    zerogpu_batch = spaces_gpu(duration=seed_duration, size=size)(batch_frames)


def host_model_args(args: argparse.Namespace) -> argparse.Namespace:
    """The model options the main process loads with: on ZeroGPU a copy of ``args`` on the CPU, in
    bf16, not compiled, no FP8 (this process must never touch CUDA, ``torch.compile`` does not run
    there, and each GPU call builds the card's tier: :func:`zerogpu_placement`); elsewhere ``args``."""
    if not on_zero_gpu():
        return args
    return argparse.Namespace(**{**vars(args), "device": "cpu", "dtype": "bfloat16", "compile": False,
                                 "precision": "bf16"})


def zerogpu_placement(lm, size: str = DEFAULT_ZEROGPU_SIZE) -> CardPlacement:
    """How a ZeroGPU call puts ``lm`` (loaded on the CPU in this process) on its card
    (:func:`petri.engine.torch.card_placement.placement_for`: CUDA, in the tier for a ``size`` card)."""
    from petri.engine.torch.card_placement import placement_for

    return placement_for(lm, size)


def seed_duration(plan: SeedPlan | BatchJob) -> int:
    """The seconds a ZeroGPU call of ``plan`` (a seed, or a study's batch) asks for: those :func:`serve`
    was given (an estimate from the plan's samples and steps is not built)."""
    return _duration_s[0]


def _served_model():
    if not _served:
        raise RuntimeError("no model is served: call petri.web.gpu_executor.serve(service) first")
    return _placement[0].model(_served[0].lm) if _placement else _served[0].lm


def seed_frames(plan: SeedPlan) -> Iterator[GpuFrame]:
    """The GPU work of one seed (what runs in the ZeroGPU child): each event of ``plan`` sampled
    with the served model, yielding a :class:`GpuFrame` per step and one per finished event.
    Closing the generator stops the sampler within one step."""
    lm = _served_model()
    for index in range(len(plan.events)):
        yield from _frames(index, _event_sampler(lm, plan, index))


def _event_sampler(lm, plan: SeedPlan, index: int) -> Callable[[Callable, CancelToken], Trajectory]:
    """``sample(on_step, cancel)`` for :func:`_frames`: event ``index`` of ``plan`` sampled with ``lm``."""
    return lambda on_step, cancel: sample_planned(lm, plan, index, on_step=on_step, cancel=cancel)


def batch_frames(job: BatchJob) -> Iterator[GpuFrame]:
    """The GPU work of one study batch (one ZeroGPU call per batch): ``job`` sampled with the
    served model, a :class:`GpuFrame` per step, then one with its trajectory."""
    lm = _served_model()
    yield from _frames(job.position, lambda on_step, cancel: sample_batch(lm, job, on_step, cancel))


def _frames(event: int, sample: Callable[[Callable, CancelToken], Trajectory]) -> Iterator[GpuFrame]:
    """``sample(on_step, cancel)``'s per-step callback turned into yields (it samples in a thread),
    then its trajectory; closing the generator cancels it."""
    frames: queue.Queue = queue.Queue()
    token = CancelToken()

    def work() -> None:
        try:
            frames.put(GpuFrame(event, trajectory=sample(lambda step: frames.put(GpuFrame(event, step)), token)))
        except BaseException as err:  # noqa: BLE001 - raised again on the generator's side
            frames.put(err)

    sampler = threading.Thread(target=work, name="petri-gpu-sampler", daemon=True)
    sampler.start()
    try:
        while True:
            frame = frames.get()
            if isinstance(frame, BaseException):
                raise frame
            yield frame
            if frame.step is None:
                return
    finally:
        token.cancel("cancelled")
        sampler.join()


#: :func:`seed_frames` under ``spaces.GPU``: what :func:`zerogpu_seed_stream` calls.
zerogpu_seed = spaces_gpu(duration=seed_duration, size=DEFAULT_ZEROGPU_SIZE)(seed_frames)
#: :func:`batch_frames` under ``spaces.GPU``: what :class:`ZeroGpuStudyExecutor` calls, once a batch.
zerogpu_batch = spaces_gpu(duration=seed_duration, size=DEFAULT_ZEROGPU_SIZE)(batch_frames)


def _is_abort(err: BaseException) -> bool:
    """Whether ``err`` is ``spaces``' "GPU task aborted" (a ``gradio.Error``)."""
    import gradio as gr  # lazily: the API alone does not load Gradio

    return isinstance(err, gr.Error) and getattr(err, "message", str(err)) == ABORTED


def zerogpu_seed_stream(service: PetriService, plan: SeedPlan, owner: str | None = None,
                        cancel: CancelToken | None = None) -> Iterator[tuple[str, Any]]:
    """Run ``plan`` through :data:`zerogpu_seed` from this thread, storing it as run
    ``plan.run_id`` (a new id if None); yields ``("progress", LiveStep)`` per step, then
    ``("done", SeedResult)``, as :func:`petri.web.ui.live.stream` does. ``cancel`` (checked at
    every frame, so within one step) closes the GPU call and raises
    :class:`~petri.core.cancel.Cancelled`; an aborted call raises :class:`GpuAborted`; in both
    cases the finished events stay stored and the run is marked (``cancelled`` / ``failed``)."""
    run_id = plan.run_id or uuid.uuid4().hex
    plan = replace(plan, run_id=run_id)
    started = time.perf_counter()
    service.start_seed_run(plan, owner)
    trajectories: list[Trajectory] = []
    closed = False  # the caller dropped this stream (e.g. the browser went away): recorded as cancelled
    try:
        with service.cancellable(cancel) as token, recorded_run(service.store, run_id):
            frames = zerogpu_seed(plan)
            try:
                for frame in frames:
                    token.check()
                    if frame.step is not None:
                        try:
                            yield "progress", frame.step
                        except GeneratorExit:
                            closed = True
                            raise Cancelled("cancelled") from None
                        continue
                    service.save_seed_event(plan, frame.event, frame.trajectory)
                    trajectories.append(frame.trajectory)
            except Exception as err:
                if _is_abort(err):
                    raise GpuAborted(run_id, len(trajectories), len(plan.events)) from err
                raise
            finally:
                frames.close()  # a cancel or an error: the GPU call stops at its next yield
    except Cancelled:
        if closed:
            return
        raise
    yield "done", SeedResult(run_id, trajectories, plan.groups, time.perf_counter() - started)


def run_zerogpu_seed(service: PetriService, plan: SeedPlan, on_step=None, cancel: CancelToken | None = None,
                     owner: str | None = None) -> SeedResult:
    """:func:`zerogpu_seed_stream` to its end, ``on_step`` seeing each step: the ZeroGPU form of
    :meth:`~petri.app.service.PetriService.seed`."""
    for kind, payload in zerogpu_seed_stream(service, plan, owner, cancel):
        if kind == "done":
            return payload
        if on_step is not None:
            on_step(payload)
    raise RuntimeError("the GPU call ended without its result")  # unreachable: the stream ends with "done"


class ZeroGpuStudyExecutor(LocalExecutor):
    """A study's batches on ZeroGPU, for :func:`petri.study.runner.run_study`: one ``spaces.GPU``
    call per batch (:data:`zerogpu_batch`), from the caller's thread; the layouts are checked and the
    model's facts read here, on ``lm`` (no GPU work). The runner stores each batch as it lands, so an
    aborted call (:class:`GpuAborted`) keeps every finished batch and running the study again resumes
    it. ``on_step`` sees each step (CPU data). Not yet wired to the Study tab or ``POST /api/study``."""

    name = "zerogpu"

    def run(self, jobs, on_landed, cancel: CancelToken | None = None) -> None:
        for done, job in enumerate(jobs):
            frames = zerogpu_batch(job)
            try:
                for frame in frames:
                    if cancel is not None:
                        cancel.check()
                    if frame.step is not None:
                        if self.on_step is not None:
                            self.on_step(frame.step)
                        continue
                    on_landed(job, frame.trajectory, self.name)
            except Exception as err:
                if _is_abort(err):
                    raise GpuAborted(job.run_id or "", done, len(jobs), "batches of this call") from err
                raise
            finally:
                frames.close()
