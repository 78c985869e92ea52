"""The ZeroGPU fork harness itself (tests/zerogpu_support.py), before anything runs under it: a
fresh forked child per call that is gone afterwards, every yield pickled (an unpicklable one fails
the call), ``duration`` enforced by killing the child ("GPU task aborted"), errors as ``spaces``
reports them, and the parent refused CUDA."""

from __future__ import annotations

import os
import pickle
import threading
import time
from dataclasses import dataclass

import gradio as gr
import numpy as np
import pytest

import zerogpu_support as harness
from zerogpu_support import ABORTED, GPU, ZeroGpuViolation


@pytest.fixture(autouse=True)
def fresh_calls():
    harness.CALLS.clear()
    yield
    harness.CALLS.clear()


def counting(n: int):
    for i in range(n):
        yield {"i": i, "pid": os.getpid(), "row": np.arange(i + 1)}


def test_each_call_runs_in_a_fresh_child_that_is_dropped_after_it():
    run = GPU(duration=30)(counting)
    first, second = list(run(3)), list(run(2))
    assert [y["i"] for y in first] == [0, 1, 2] and [y["i"] for y in second] == [0, 1]
    np.testing.assert_array_equal(first[2]["row"], [0, 1, 2])
    pids = {y["pid"] for y in first} | {y["pid"] for y in second}
    assert len(pids) == 2 and os.getpid() not in pids  # one child per call, never the parent
    assert [c.pid for c in harness.CALLS] == [first[0]["pid"], second[0]["pid"]]
    assert all(c.exitcode == 0 and c.yields == n for c, n in zip(harness.CALLS, (3, 2)))  # exited, not kept


def test_arguments_and_yields_are_copies_made_by_pickling():
    shared = {"seen": []}

    def appending(box):
        box["seen"].append("child")
        yield box

    (back,) = GPU(appending)(shared)
    assert back == {"seen": ["child"]} and shared == {"seen": []}  # the child changed its own copy only


def with_a_lambda():
    yield 1
    yield lambda: 2  # a function made here cannot be pickled by reference


def test_a_yield_that_cannot_be_pickled_fails_the_call_after_the_ones_before_it():
    got = []
    with pytest.raises(gr.Error) as err:
        got.extend(GPU(with_a_lambda)())  # keeps what came before the error
    assert got == [1]
    # spaces names the error's class only: pickling a local function is an AttributeError or PicklingError
    assert err.value.title == harness.WORKER_ERROR and err.value.message in ("AttributeError", "PicklingError")


def test_an_argument_that_cannot_be_pickled_fails_before_any_child_starts():
    lock = threading.Lock()
    with pytest.raises((pickle.PicklingError, TypeError)):
        next(GPU(counting)(lock))
    assert harness.CALLS[0].pid is None


def sleepy(first_s: float, then_s: float):
    time.sleep(first_s)
    yield "first"
    time.sleep(then_s)
    yield "never"


def test_a_call_past_its_duration_is_killed_and_aborted_keeping_what_came_before():
    got = []
    started = time.monotonic()
    with pytest.raises(gr.Error) as err:
        got.extend(GPU(duration=lambda first_s, then_s: first_s + 1.0)(sleepy)(0.2, 60.0))
    took = time.monotonic() - started
    assert got == ["first"] and err.value.message == ABORTED and err.value.title == harness.WORKER_ERROR
    call = harness.CALLS[0]
    assert call.duration_s == pytest.approx(1.2) and call.aborted and call.exitcode == -9  # SIGKILL
    assert took < 10


def test_a_duration_that_fits_is_not_enforced_early():
    assert list(GPU(duration=5)(sleepy)(0.1, 0.1)) == ["first", "never"]
    assert not harness.CALLS[0].aborted


def failing():
    yield 1
    raise KeyError("the secret detail")


def refusing():
    yield 1
    raise gr.Error("a message for the visitor")


def test_errors_come_back_as_spaces_reports_them():
    with pytest.raises(gr.Error) as err:
        list(GPU(failing)())
    assert err.value.message == "KeyError" and "secret" not in err.value.message  # the class name only
    with pytest.raises(gr.Error, match="a message for the visitor"):
        list(GPU(refusing)())


def test_closing_the_parent_generator_stops_the_child_at_its_next_yield():
    frames = GPU(duration=30)(counting)(10_000)
    assert next(frames)["i"] == 0
    time.sleep(1.0)  # the child fills the pipe meanwhile and blocks in its send, as it may under load
    frames.close()
    call = harness.CALLS[0]
    assert call.exitcode == 0 and not call.aborted  # asked to stop, it ended on its own


def test_the_parent_initialising_cuda_is_refused(monkeypatch):
    import torch

    assert not harness.parent_cuda_initialised()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(ZeroGpuViolation, match="parent process initialised CUDA"):
        next(GPU(counting)(1))
    assert not harness.CALLS  # refused before anything was forked


@dataclass
class Frame:
    index: int
    argmax: object


def tensors():
    import torch

    yield Frame(0, np.zeros(2))
    yield Frame(1, {"rows": [torch.zeros(2)]})


def test_a_tensor_on_a_refused_device_is_refused_naming_where_it_was(monkeypatch):
    # no CUDA here: the same check, pointed at the CPU, shows it finds a tensor inside a yield
    assert list(GPU(tensors)())[1].index == 1  # CPU tensors pass by default
    monkeypatch.setattr(harness, "FORBIDDEN_DEVICES", ("cpu",))
    with pytest.raises(ZeroGpuViolation, match=r"yield\.argmax\['rows'\]\[0\]"):
        list(GPU(tensors)())
