"""The one denoising loop every sampler runs, and the record it keeps.

A *stepper* is one family's step on one framework and tier (:class:`Stepper`): the eager one,
:class:`RecordedStepper`, calls the model and then the family's scheduler (a ``step()`` that never
sees the model: :mod:`petri.engine.families.uniform` for DiffusionGemma,
:mod:`petri.engine.families.masked` for masked diffusion) and writes the step's row of the record
(:class:`Record`); the CUDA fast path (:mod:`petri.engine.cuda.fast_sampler`) replays captured graphs
that write the same rows on the device. :func:`run_loop` owns what is the same for all of them:
cancellation once per step, the live callback, the stop test and the one copy of the record to the
host at the end, assembled into a :class:`~petri.core.trajectory.Trajectory`.

The array operations of one framework (torch, MLX) sit behind :class:`ArrayOps`, so the loop, the
record and the schedulers are written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from petri.core.cancel import CancelToken
from petri.core.recorded import STEP_FIELDS
from petri.core.trajectory import Trajectory, assemble_trajectory
from petri.engine.base import LiveStep, SampleRequest, SamplingModel, StepCallback, StepRead


class ArrayOps(Protocol):
    """The array operations of one framework that the loop, the record and the schedulers use.
    Arrays are the framework's own ((S, L) tokens, (S, L, V) logits); ``numpy`` copies to the host."""

    def where(self, condition, a, b): ...
    def tokens(self, host: np.ndarray): ...  # (S, L) ids from the host
    def mask(self, host: np.ndarray): ...  # (S, L) bool from the host
    def randint(self, high: int, shape: tuple[int, int]): ...  # uniform tokens in [0, high)
    def categorical(self, logits): ...  # one draw per row of softmax(logits): (S, L, V) → (S, L)
    def argmax(self, logits): ...
    def entropy(self, logits): ...  # nats of softmax over the last axis, (S, L, V) → (S, L)
    def accept_mask(self, entropy, anchor_mask, bound: float): ...
    def zeros_bool(self, shape): ...
    def zeros_int(self, shape): ...
    def int32(self, array): ...
    def float32(self, array): ...
    def to_model_dtype(self, array): ...
    def stack(self, arrays: Sequence, axis: int): ...
    def numpy(self, array) -> np.ndarray: ...
    def all(self, array) -> bool: ...
    def materialize(self, *arrays) -> None: ...  # MLX evaluates its lazy graph; torch does nothing


class Stepper(Protocol):
    """One family's step on one framework and tier, as the loop drives it."""

    max_steps: int
    can_stop: bool  # whether samples may finish before ``max_steps`` (then ``all_finished`` is read)

    def step(self, index: int) -> None: ...
    def live(self, index: int) -> LiveStep: ...  # the step's rows on the host
    def all_finished(self) -> bool: ...
    def result(self, steps_run: int) -> dict[str, np.ndarray]: ...  # argmax, entropy, accepted, canvas, steps, final_ids


#: The record's layout, read from the per-step fields' one declaration
#: (:data:`petri.core.recorded.STEP_FIELDS`): per step and position (S, L), the field, its dtype and
#: the value it holds where the sample had already finished (raw argmax and canvas -1, entropy NaN,
#: accepted False). Both ways of keeping the rows below write through :meth:`Record.write`.
RECORD_LAYOUT: tuple[tuple[str, str, Any], ...] = tuple((f.name, f.dtype, f.finished) for f in STEP_FIELDS)
_FINISHED = {name: value for name, _, value in RECORD_LAYOUT}


class GrowingRows:
    """Where :class:`Record` keeps its rows by default: one list per field, a row (S, L) appended per
    step, and the steps each sample ran (S,) int32, replaced by a new array per step (a lazy
    framework's arrays are immutable)."""

    def __init__(self, ops, batch: int):
        self.ops = ops
        self.rows: list[list] = [[] for _ in RECORD_LAYOUT]
        self.steps = ops.zeros_int((batch,))

    def add_steps(self, added) -> None:
        self.steps = self.steps + added

    def put(self, row: tuple, index) -> None:
        """Append the step's ``row`` (one (S, L) array per field); ``index`` is implied by the order."""
        for rows, value in zip(self.rows, row):
            rows.append(value)

    def row(self, index: int) -> list:
        return [rows[index] for rows in self.rows]

    def stacked(self, steps_run: int) -> list:
        """Each field's first ``steps_run`` rows as one (S, T, L) array."""
        return [self.ops.stack(rows[:steps_run], 1) for rows in self.rows]


class Record:
    """The per-step record, kept on the device (layout: :data:`RECORD_LAYOUT`): rows of (S, L) raw
    argmax, entropy, accepted and the canvas after the step, and the steps each sample ran (S,).
    Copied to the host once, as (S, T, L). ``rows`` keeps them: :class:`GrowingRows` unless given
    (the CUDA fast path gives buffers preallocated for its captured graphs,
    :class:`petri.engine.cuda.step_logs.StepLogs`)."""

    def __init__(self, ops, batch: int, rows=None):
        self.ops = ops
        self.rows = GrowingRows(ops, batch) if rows is None else rows

    @property
    def steps(self):
        return self.rows.steps

    def count(self, running) -> None:
        """A step starts: every running sample (S,) bool has run one more."""
        self.rows.add_steps(self.ops.int32(running))

    def write(self, running, raw_argmax, entropy, accepted, canvas, index=None) -> None:
        """The step's row: what the model said at every position, before anything was forced, and
        the canvas the step left; a finished sample's positions hold :data:`RECORD_LAYOUT`'s values.
        ``index``: the step (a Python int, or a device counter inside a CUDA graph; ``None`` when the
        rows are appended)."""
        ops, live = self.ops, running[:, None]
        row = {"argmax": ops.where(live, ops.int32(raw_argmax), _FINISHED["argmax"]),
               "entropy": ops.where(live, ops.float32(entropy), _FINISHED["entropy"]),
               "accepted": accepted & live,  # False where finished
               "canvas": ops.where(live, ops.int32(canvas), _FINISHED["canvas"])}
        self.rows.put(tuple(row[name] for name, _, _ in RECORD_LAYOUT), index)  # in the declared order

    def row(self, index: int) -> dict:
        """Step ``index``'s row: field name → (S, L) array on the device."""
        return {name: value for (name, _, _), value in zip(RECORD_LAYOUT, self.rows.row(index))}

    def last_row(self) -> list:
        return [self.steps, *self.rows.row(-1)]

    def live(self, index: int, finished) -> LiveStep:
        """Step ``index`` for the live callback, on the host (``finished`` (S,) bool)."""
        numpy, row = self.ops.numpy, self.row(index)
        return LiveStep(index, numpy(row["argmax"]), numpy(row["canvas"]), numpy(row["accepted"]), numpy(finished))

    def host(self, steps_run: int) -> dict[str, np.ndarray]:
        """The record on the host: each field (S, T, L) for T = ``steps_run``, and ``steps`` (S,)."""
        numpy = self.ops.numpy
        return {**{name: numpy(array) for (name, _, _), array in zip(RECORD_LAYOUT, self.rows.stacked(steps_run))},
                "steps": numpy(self.steps)}


class Scheduler(Protocol):
    """A family's step (diffusers' sense: it turns the model's output into the next canvas and
    never sees the model). State: ``canvas`` (S, L), ``finished`` (S,) bool, ``model_input`` (what
    the next forward takes besides the canvas, e.g. self-conditioning), ``final_ids`` (S, L)."""

    max_steps: int
    can_stop: bool
    canvas: Any
    finished: Any
    model_input: Any
    final_ids: Any

    def step(self, logits, index: int) -> tuple[Any, Any, Any]: ...  # raw argmax, entropy, accepted
    def state(self) -> list: ...  # the arrays a lazy framework must evaluate after a step


class RecordedStepper:
    """The eager stepper: ``forward(canvas, model_input) → logits`` (S, L, V), then ``on_read``
    (:data:`~petri.engine.base.StepRead`, when set), then the scheduler's step, then the record's row."""

    def __init__(self, ops, forward: Callable, scheduler: Scheduler, batch: int):
        self.ops, self.forward, self.scheduler = ops, forward, scheduler
        self.record = Record(ops, batch)
        self.max_steps, self.can_stop = scheduler.max_steps, scheduler.can_stop
        self.on_read: StepRead | None = None

    def read(self, index: int):
        """Step ``index``'s forward and its read (``on_read``), nothing else: its logits (S, L, V)."""
        scheduler = self.scheduler
        logits = self.forward(scheduler.canvas, scheduler.model_input)
        if self.on_read is not None:
            self.on_read(index, {"logits": logits, "canvas": scheduler.canvas})
        return logits

    def step(self, index: int) -> None:
        scheduler = self.scheduler
        running = ~scheduler.finished
        self.record.count(running)
        logits = self.read(index)
        raw_argmax, entropy, accepted = scheduler.step(logits, index)
        self.record.write(running, raw_argmax, entropy, accepted, scheduler.canvas)
        self.ops.materialize(*scheduler.state(), *self.record.last_row())

    def live(self, index: int) -> LiveStep:
        return self.record.live(index, self.scheduler.finished)

    def all_finished(self) -> bool:
        return self.ops.all(self.scheduler.finished)

    def result(self, steps_run: int) -> dict[str, np.ndarray]:
        return {**self.record.host(steps_run), "final_ids": self.ops.numpy(self.scheduler.final_ids)}


def read_steps(stepper: RecordedStepper, steps: int, on_read: StepRead, cancel: CancelToken | None = None) -> None:
    """:meth:`~petri.engine.base.SteppedModel.read_steps` on an eager ``stepper`` ready for step 0:
    ``steps`` steps with ``on_read`` at each, the last one its forward only; ``cancel`` checked at
    the start of every step."""
    stepper.on_read = on_read
    for index in range(steps):
        if cancel is not None:
            cancel.check()
        if index < steps - 1:
            stepper.step(index)
        else:
            stepper.read(index)


def run_loop(
    stepper: Stepper,
    *,
    lm: SamplingModel,
    request: SampleRequest,
    pinned_mask: np.ndarray,
    sampler: str,
    started: float,
    encoded: float,
    on_step: StepCallback | None = None,
    cancel: CancelToken | None = None,
    prepared: float | None = None,
) -> Trajectory:
    """Run ``stepper`` until ``max_steps`` or until every sample finished, then assemble the
    trajectory (``pinned_mask`` (S, L)
    bool on the host). ``cancel`` is checked at the start of every step (a host-side flag, no
    device synchronisation); ``on_step`` costs one device→host copy per step and sees each step's
    :class:`~petri.engine.base.LiveStep` with ``pinned_mask`` and the request's run id. Timings: the prompt
    encoded at ``encoded``, the stepper prepared (CUDA graphs captured) at ``prepared``."""
    denoise_from = encoded if prepared is None else prepared
    index = 0
    for index in range(stepper.max_steps):
        if cancel is not None:
            cancel.check()
        stepper.step(index)
        if on_step is not None:
            on_step(replace(stepper.live(index), pinned=pinned_mask, run_id=request.run_id))
        if stepper.can_stop and stepper.all_finished():
            break
    arrays = stepper.result(index + 1)
    timings = {"encode_s": encoded - started}
    if prepared is not None:
        timings["capture_s"] = prepared - encoded
    timings["denoise_s"] = time.perf_counter() - denoise_from
    timings["total_s"] = time.perf_counter() - started
    return assemble_trajectory(lm, {**arrays, "anchor_mask": pinned_mask}, request, timings=timings, sampler=sampler)
