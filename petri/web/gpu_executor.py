"""Where the model work runs: the dedicated-GPU (and CPU) path, or Hugging Face ZeroGPU.

**Dedicated GPU or CPU** (the default): nothing here changes it. The tabs queue their work as jobs
of the service's worker thread (``petri-jobs``, e.g. :meth:`~petri.app.service.PetriService.submit_seed`)
and the API's routes call the service from a worker thread.

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
:func:`petri.study.execution.runner.run_study`; :func:`zerogpu_study_stream` for the Study tab and the
Gradio endpoint ``/study``), and a probe read is one call (:func:`read_frames`, :func:`run_zerogpu_read`).
(The FastAPI routes that run the model answer 501 on ZeroGPU: :mod:`petri.web.zerogpu_routes`.)

The main process keeps the model on the CPU (:func:`host_model_args`); each call puts it on its card
(:func:`zerogpu_placement`, :mod:`petri.engine.torch.card_placement`) in the tier for the card size
each call asks for (``PETRI_ZEROGPU_SIZE``).

Each call's ``duration`` is estimated from the work it carries (:mod:`petri.web.gpu_cost`;
``PETRI_GPU_DURATION_S`` overrides it). A call that ZeroGPU stops ("GPU task aborted") or refuses
(the visitor's quota exceeded, a duration above the maximum, no GPU in time) raises
:class:`GpuAborted`, naming what finished and is stored.
"""

from __future__ import annotations

import argparse
import contextvars
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from petri.app.jobs import recorded_run
from petri.app.probe import ProbeRun, save_read
from petri.app.service import PetriService, SeedResult
from petri.core.cancel import Cancelled, CancelToken
from petri.core.config import DEFAULT_ZEROGPU_CARD
from petri.core.dish import encode_prompt
from petri.core.plan import ProbePlan, SeedPlan
from petri.core.probe import AUTO_DRAWS
from petri.core.trajectory import Trajectory
from petri.core.watch import NO_WATCH, Watch
from petri.engine.base import LiveStep
from petri.engine.probe import ProbeResult, read_planned
from petri.engine.seeding import sample_planned
from petri.study.execution.executors import BatchJob, LocalExecutor, sample_batch
from petri.study.execution.runner import StudyResult
from petri.study.plan import StudyPlan
from petri.web.gpu_cost import CallWork, duration_s

if TYPE_CHECKING:  # the web layer imports no torch before a model loads
    from petri.engine.torch.card_placement import CardPlacement

#: The variable the platform sets on a ZeroGPU Space.
ZERO_GPU_ENV = "SPACES_ZERO_GPU"
#: The message of the error ``spaces`` raises in the main process when the GPU child dies or runs
#: past its ``duration``.
ABORTED = "GPU task aborted"
#: The titles of the errors ``spaces`` raises when it does not start a call (``spaces/zero/client.py``):
#: the visitor's quota, a duration above the maximum, credits, no GPU in time.
REFUSED_TITLES = ("ZeroGPU quota exceeded", "ZeroGPU illegal duration", "ZeroGPU pending credits exceeded",
                  "ZeroGPU queue timeout")


def on_zero_gpu() -> bool:
    """Whether this process serves on ZeroGPU (``SPACES_ZERO_GPU`` is ``1``, ``t`` or ``true``)."""
    return os.environ.get(ZERO_GPU_ENV, "").lower() in ("1", "t", "true")


def spaces_gpu(**options: Any) -> Callable[[Callable], Callable]:
    """``spaces.GPU(**options)`` when the ``spaces`` package is installed (itself a no-op off
    ZeroGPU); else the identity. ``spaces`` is imported here, lazily: it is never pinned."""
    try:
        import spaces
    except ImportError:
        return lambda fn: fn
    return spaces.GPU(**options)


class GpuAborted(RuntimeError):
    """ZeroGPU stopped the call ("GPU task aborted": its ``duration`` ran out, or the child died) or
    refused to start it (``refusal``: ``spaces``' message, e.g. the visitor's quota exceeded);
    ``stored`` of ``total`` (events, batches) were finished and stored before it stopped."""

    def __init__(self, run_id: str, stored: int, total: int, unit: str = "events", refusal: str | None = None):
        why = (f"ZeroGPU did not start the GPU call ({refusal})" if refusal is not None
               else f"the GPU time of this call ran out (ZeroGPU: {ABORTED})")
        kept = f"{stored} of {total} {unit} finished and are stored in run {run_id}" if run_id else "nothing was stored"
        super().__init__(f"{why}; {kept}")
        self.run_id, self.stored, self.total, self.refusal = run_id, stored, total, refusal

    @classmethod
    def of(cls, err: BaseException, run_id: str, stored: int, total: int, unit: str = "events") -> GpuAborted | None:
        """The :class:`GpuAborted` that ``spaces``' error ``err`` stands for (None: another error)."""
        import gradio as gr  # lazily: the API alone does not load Gradio

        if not isinstance(err, gr.Error):
            return None
        message = str(getattr(err, "message", err))
        if message == ABORTED:
            return cls(run_id, stored, total, unit)
        title = getattr(err, "title", None)
        return cls(run_id, stored, total, unit, f"{title}: {message.strip()}") if title in REFUSED_TITLES else None


@dataclass(frozen=True)
class GpuFrame:
    """What the GPU call yields (CPU data only): a denoising ``step`` of event ``event`` (from 0),
    as the live view wants it, or, with ``step`` None, the event's finished ``trajectory``."""

    event: int
    step: LiveStep | None = None
    trajectory: Trajectory | None = None


_served: list[PetriService] = []
#: The seconds every call asks for (:func:`serve` sets it; ``None``: each call's estimate).
_duration_s: list[int | None] = [None]
#: How the served model is put on the card inside each GPU call (empty: used where it was loaded).
_placement: list[CardPlacement] = []
#: The card size every call asks for (:func:`serve` sets it).
#: (``PETRI_ZEROGPU_SIZE``'s default, :data:`petri.core.config.DEFAULT_ZEROGPU_CARD`: the whole card, since
#: the real DiffusionGemma fits no tier on half of one, :func:`petri.engine.torch.card_placement.card_tier`).
_size: list[str] = [DEFAULT_ZEROGPU_CARD]


def card_size() -> str:
    """The ZeroGPU card size every call asks for (``large`` or ``xlarge``: what its quota counts)."""
    return _size[0]


def serve(service: PetriService, duration_s: int | None = None, placement: CardPlacement | None = None,
          size: str = DEFAULT_ZEROGPU_CARD) -> None:
    """Name the service whose model :func:`seed_frames` samples with, the seconds every call asks for
    (``PETRI_GPU_DURATION_S``, :class:`petri.core.config.PetriConfig`; ``None``: each call's estimate,
    :func:`call_duration`), how each call puts that model on
    its GPU (``placement``: :class:`~petri.engine.torch.card_placement.CardPlacement`; on a Space the
    model stays on the CPU in this process and each call places it; ``None`` samples with it where it
    was loaded) and the card size each call asks for (``PETRI_ZEROGPU_SIZE``): called once the model is
    loaded, before any GPU call (a ZeroGPU child is forked from this process and finds it here)."""
    global zerogpu_seed, zerogpu_batch, zerogpu_read
    _served[:] = [service]
    _duration_s[:] = [duration_s]
    _placement[:] = [placement] if placement is not None else []
    _size[:] = [size]
    zerogpu_seed, zerogpu_batch, zerogpu_read = decorated_calls(size)


def host_model_args(args: argparse.Namespace) -> argparse.Namespace:
    """The model options the main process loads with: on ZeroGPU a copy of ``args`` on the CPU, in
    bf16, not compiled, no FP8 (this process must never touch CUDA, ``torch.compile`` does not run
    there, and each GPU call builds the card's tier: :func:`zerogpu_placement`); elsewhere ``args``."""
    if not on_zero_gpu():
        return args
    return argparse.Namespace(**{**vars(args), "device": "cpu", "dtype": "bfloat16", "compile": False,
                                 "precision": "bf16"})


def zerogpu_placement(lm, size: str = DEFAULT_ZEROGPU_CARD) -> CardPlacement:
    """How a ZeroGPU call puts ``lm`` (loaded on the CPU in this process) on its card
    (:func:`petri.engine.torch.card_placement.placement_for`: CUDA, in the tier for a ``size`` card)."""
    from petri.engine.torch.card_placement import placement_for

    return placement_for(lm, size)


def seed_work(plan: SeedPlan) -> CallWork:
    """What a seed's call samples: every event of ``plan``, its longest prompt."""
    return CallWork(plan.samples, plan.settings.max_denoising_steps, int(plan.events[0].pinned.shape[1]),
                    max(len(p.prompt.ids) for p in plan.events), len(plan.events))


def batch_work(job: BatchJob, lm=None) -> CallWork:
    """What a study batch's call samples (its prompt encoded with the served model's tokenizer)."""
    lm = lm or _served_lm()
    prompt = encode_prompt(lm.tokenizer, job.dish.prompt_text(), pin_thought_channel=job.settings.pin_thought_channel)
    return CallWork(job.samples, job.settings.max_denoising_steps, lm.canvas_length, len(prompt.ids))


def read_work(plan: ProbePlan, lm=None) -> CallWork:
    """What a probe read's call samples: per listing order and question, its draws (``auto``: one
    read and :data:`~petri.core.probe.AUTO_DRAWS` more, at most) over ``plan.request.steps`` steps."""
    lm = lm or _served_lm()
    request = plan.request
    draws = 1 + AUTO_DRAWS if request.samples == "auto" else int(request.samples)
    orders = len(plan.orders) * len(request.questions)
    return CallWork(draws, request.steps, lm.canvas_length, len(plan.base.prompt_ids), orders)


def call_duration(work: CallWork) -> int:
    """The seconds a call of ``work`` asks for: those :func:`serve` was given (``PETRI_GPU_DURATION_S``)
    if any, else the estimate (:func:`petri.web.gpu_cost.duration_s`)."""
    override = _duration_s[0]
    return int(override) if override is not None else duration_s(work)


def _duration(work: Callable[[Any], CallWork]) -> Callable[[Any], int]:
    """``spaces.GPU``'s ``duration`` callable of a call's one argument: the seconds :func:`serve` was
    given, else :func:`call_duration` of its ``work`` (not computed when the seconds are given)."""

    def duration(arg: Any) -> int:
        override = _duration_s[0]
        return int(override) if override is not None else call_duration(work(arg))

    return duration


#: The ``duration`` of a seed's, a study batch's and a probe read's call.
seed_duration, batch_duration, read_duration = _duration(seed_work), _duration(batch_work), _duration(read_work)


def _served_lm():
    """The served model as this process holds it (its facts and tokenizer; never placed on a card:
    the duration callables run in the main process)."""
    if not _served:
        raise RuntimeError("no model is served: call petri.web.gpu_executor.serve(service) first")
    return _served[0].lm


def _served_model():
    """The served model as a GPU call samples with it: placed on this process's card, if a placement was served."""
    lm = _served_lm()
    return _placement[0].model(lm) if _placement else lm


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


def read_frames(plan: ProbePlan) -> Iterator[ProbeResult]:
    """The GPU work of one probe read (one ZeroGPU call): ``plan``'s slots read with the served
    model, yielding the :class:`~petri.engine.probe.ProbeResult` (CPU data) once. The read runs on
    a fresh thread of the child, as a seed's sampling does (:func:`_frames`: GNU OpenMP is not
    fork-safe on the main thread of a child forked after the parent used it)."""
    lm = _served_model()
    done: list = []

    def work() -> None:
        try:
            done.append(read_planned(lm, plan))
        except BaseException as err:  # noqa: BLE001 - raised again on the generator's side
            done.append(err)

    reader = threading.Thread(target=work, name="petri-gpu-reader", daemon=True)
    reader.start()
    reader.join()
    if isinstance(done[0], BaseException):
        raise done[0]
    yield done[0]


def decorated_calls(size: str) -> tuple[Callable[..., Generator], Callable[..., Generator], Callable[..., Generator]]:
    """The GPU generators under ``spaces.GPU`` for a ``size`` card, each with its own ``duration``
    callable: (:func:`seed_frames`, what :func:`zerogpu_seed_stream` calls; :func:`batch_frames`, what
    :class:`ZeroGpuStudyExecutor` calls once a batch; :func:`read_frames`, what :func:`run_zerogpu_read`
    calls), held as :data:`zerogpu_seed`, :data:`zerogpu_batch` and :data:`zerogpu_read` (:func:`serve`
    decorates them again for the size it is given)."""
    return (spaces_gpu(duration=seed_duration, size=size)(seed_frames),
            spaces_gpu(duration=batch_duration, size=size)(batch_frames),
            spaces_gpu(duration=read_duration, size=size)(read_frames))


zerogpu_seed, zerogpu_batch, zerogpu_read = decorated_calls(DEFAULT_ZEROGPU_CARD)


def zerogpu_seed_stream(service: PetriService, plan: SeedPlan, owner: str | None = None,
                        cancel: CancelToken | None = None, with_event: bool = False) -> Iterator[tuple[str, Any]]:
    """Run ``plan`` through :data:`zerogpu_seed` from this thread, storing it as run
    ``plan.run_id`` (a new id if None); yields ``("progress", LiveStep)`` per step, then
    ``("done", SeedResult)``, as :func:`petri.web.ui.live.stream` does (``with_event``: each step as
    ``(event index, LiveStep)``, as the Compare tab's job reports it). ``cancel`` (checked at
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
                            yield "progress", (frame.event, frame.step) if with_event else frame.step
                        except GeneratorExit:
                            closed = True
                            raise Cancelled("cancelled") from None
                        continue
                    service.save_seed_event(plan, frame.event, frame.trajectory)
                    trajectories.append(frame.trajectory)
            except Exception as err:
                stopped = GpuAborted.of(err, run_id, len(trajectories), len(plan.events))
                if stopped is not None:
                    raise stopped from err
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
    """A study's batches on ZeroGPU, for :func:`petri.study.execution.runner.run_study`: one ``spaces.GPU``
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
                stopped = GpuAborted.of(err, job.run_id or "", done, len(jobs), "batches to compute")
                if stopped is not None:
                    raise stopped from err
                raise
            finally:
                frames.close()


def run_zerogpu_study(service: PetriService, plan: StudyPlan, *, watch: Watch = NO_WATCH,
                      owner: str | None = None) -> StudyResult:
    """:meth:`~petri.app.service.PetriService.run_study` on ZeroGPU: the resumable runner, each
    batch one ``spaces.GPU`` call from this thread (:class:`ZeroGpuStudyExecutor`), no model lock;
    an aborted or refused call raises :class:`GpuAborted` (the batches before it stay stored, the
    run reads ``failed``, and the same call resumes it)."""
    return service.run_study_on(ZeroGpuStudyExecutor(service.lm), plan, watch=watch, owner=owner)


def zerogpu_study_stream(service: PetriService, plan: StudyPlan, *, owner: str | None = None,
                         cancel: CancelToken | None = None) -> Iterator[tuple[str, Any]]:
    """:func:`run_zerogpu_study` as the Study tab streams a study job: ``("progress", StudyProgress)``
    per batch, then ``("done", StudyResult)``; its errors (:class:`GpuAborted`,
    :class:`~petri.core.cancel.Cancelled`) raised here. The runner drives the batches from a thread
    started with a copy of this thread's context (``contextvars``: where Gradio keeps the request
    and ``spaces`` reads the visitor's quota token), so each batch's GPU call carries the caller's
    request as one made here would; closing the stream cancels the run (its stored batches stay)."""
    messages: queue.Queue = queue.Queue()
    token = CancelToken()
    outer = cancel

    def watch() -> None:  # the caller's token (and its heartbeat) seen at every frame of every batch
        if outer is not None:
            try:
                outer.check()
            except Cancelled as stop:
                token.cancel(stop.reason)

    token.heartbeat = watch

    def work() -> None:
        try:
            messages.put(("done", run_zerogpu_study(
                service, plan, owner=owner, watch=Watch(progress=lambda p: messages.put(("progress", p)), cancel=token))))
        except BaseException as err:  # noqa: BLE001 - raised again in the caller's thread
            messages.put(("error", err))

    driver = threading.Thread(target=contextvars.copy_context().run, args=(work,), name="petri-zerogpu-study",
                              daemon=True)
    driver.start()
    try:
        while True:
            kind, payload = messages.get()
            if kind == "error":
                raise payload
            yield kind, payload
            if kind == "done":
                return
    finally:
        token.cancel("cancelled")  # a closed stream: the run stops at its next frame
        driver.join()


def run_zerogpu_read(service: PetriService, plan: ProbePlan, cancel: CancelToken | None = None,
                     owner: str | None = None) -> ProbeRun:
    """One probe read on ZeroGPU (:data:`zerogpu_read`, one call from this thread), stored as the
    service stores a read (:func:`petri.app.probe.save_read`): a :class:`~petri.app.probe.ProbeRun`.
    The plan was checked at the edge (no model work). ``cancel`` is seen when the read's one frame
    arrives (a read is not stopped midway); an aborted or refused call raises :class:`GpuAborted`
    and stores nothing."""
    started = time.perf_counter()
    frames = zerogpu_read(plan)
    try:
        result = next(iter(frames))
    except Exception as err:
        stopped = GpuAborted.of(err, "", 0, 1, "reads")
        if stopped is not None:
            raise stopped from err
        raise
    finally:
        frames.close()
    if cancel is not None:
        cancel.check()
    run_id, document = save_read(service, result, owner)
    return ProbeRun(run_id, result, document, time.perf_counter() - started)
