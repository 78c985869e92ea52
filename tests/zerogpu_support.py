"""A stand-in for Hugging Face ZeroGPU's ``spaces.GPU``, for testing a Space's GPU path off-Space.

What it copies from ``spaces`` 0.51.3 (``spaces/zero/wrappers.py``, ``generator_function_wrapper``;
read, not copied):

- the decorated generator function runs in a **forked child**, a fresh one per call
  (``multiprocessing`` with the ``fork`` start method), started at the parent generator's first
  ``next()``; inside a child a decorated call runs in place;
- the call's arguments are **pickled** into the child and every yield is pickled back (a yield
  that cannot be pickled ends the call with an error, as ``spaces`` turns its ``PicklingError``
  into one);
- ``duration`` (seconds, a ``timedelta``, or a callable of the call's arguments; ``None``: 60 s) is
  a wall-clock limit from the call's start: past it the child is killed and the parent gets
  ``gradio.Error("GPU task aborted")`` (title "ZeroGPU worker error"), the error ``spaces`` raises
  when its worker dies; a child that dies for any other reason gives the same error;
- an exception in the child reaches the parent as ``gradio.Error`` naming only its class (a
  ``gradio.Error`` raised in the child comes through as itself);
- closing the parent generator (``GeneratorExit``) asks the child to stop: it closes its generator
  after the yield it is making.

It also stands in for the two things of ``spaces``' scheduling a UI must handle: the visitor's
quota (:data:`QUOTA`: a call asking for more than is left is refused before any child starts, with
the error ``spaces/zero/client.py`` raises, "ZeroGPU quota exceeded"; it charges what a call asked
for, where the platform charges the time used: an upper bound) and the request a call carries
(:attr:`CallRecord.request`: Gradio's ``LocalContext.request`` when the call started, where
``spaces`` reads the visitor's token).

What it adds, to catch what a real Space would break on: it fails (:class:`ZeroGpuViolation`) if
the **parent** process has initialised CUDA (``torch.cuda.is_initialized()``) before or after a call
or once a yield is unpickled, or if a yield holds a torch tensor on CUDA; and it **drops the
child** after every call (killed if it has not exited within :data:`DROP_GRACE_S`), so nothing may
rely on a warm child. What it does not do: schedule a GPU, count quota, pack or move weights, or
carry Gradio's request context (``spaces``' device API is not stood in for).

    from zerogpu_support import GPU
    frames = GPU(duration=lambda plan: 30)(seed_frames)   # as spaces.GPU(duration=...)(seed_frames)
"""

from __future__ import annotations

import inspect
import multiprocessing
import pickle
import sys
import time
import traceback
from contextlib import suppress
from dataclasses import dataclass, fields, is_dataclass
from datetime import timedelta
from functools import wraps
from typing import Any

import gradio as gr

#: The message and title of the error ``spaces`` raises in the parent when the child dies.
ABORTED = "GPU task aborted"
WORKER_ERROR = "ZeroGPU worker error"
#: ``spaces``' default duration (seconds) when none is given.
DEFAULT_DURATION_S = 60.0
#: How long a child that was asked to stop, or has finished, may take to exit before it is killed.
DROP_GRACE_S = 10.0

#: The device types of torch tensors the parent refuses to receive.
FORBIDDEN_DEVICES: tuple[str, ...] = ("cuda",)

_FORK = multiprocessing.get_context("fork")
_in_child = False


class ZeroGpuViolation(AssertionError):
    """The parent process did something a ZeroGPU Space must not: initialised CUDA, or received a
    CUDA tensor from the child."""


@dataclass
class CallRecord:
    """One decorated call as the harness saw it: the child's ``pid``, the ``duration_s`` it was
    given, its ``exitcode`` once dropped, whether it was ``aborted`` past its duration, and the number
    of ``yields`` the parent received."""

    pid: int | None = None
    duration_s: float = DEFAULT_DURATION_S
    exitcode: int | None = None
    aborted: bool = False
    yields: int = 0
    request: Any = None


@dataclass
class Quota:
    """What is left of the visitor's daily quota (seconds); None (the default): no quota is kept.
    A call asks for ``duration × factor`` (``spaces``' ``duration_factor`` of a ``large`` card)."""

    left_s: float | None = None
    factor: float = 1.5


#: The visitor's quota the harness keeps (tests set ``QUOTA.left_s``; :func:`serve_on_zerogpu` resets it).
QUOTA = Quota()


def _schedule(record: CallRecord) -> None:
    """Refuse the call as ``spaces``' scheduler does when the quota left is below its request."""
    if QUOTA.left_s is None:
        return
    requested = round(record.duration_s * QUOTA.factor)
    if requested > QUOTA.left_s:
        raise gr.Error(f"You have exceeded your free ZeroGPU quota ({requested}s requested vs. {QUOTA.left_s:.0f}s left). "
                       "Try again in 0:12:00. ", title="ZeroGPU quota exceeded", print_exception=False)
    QUOTA.left_s -= requested


#: Every call made under the harness in this process, oldest first (tests read and clear it).
CALLS: list[CallRecord] = []


def parent_cuda_initialised() -> bool:
    """Whether this process has initialised CUDA (False when torch was never imported)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def tensors_on(value: Any, device_types: tuple[str, ...] = ("cuda",), where: str = "yield") -> list[str]:
    """The paths inside ``value`` (containers, dataclasses, objects' ``__dict__``) of torch tensors
    whose device type is one of ``device_types``, e.g. ``["yield[2].argmax"]``."""
    torch = sys.modules.get("torch")
    found: list[str] = []
    seen: set[int] = set()

    def walk(item: Any, path: str) -> None:
        if id(item) in seen or isinstance(item, (str, bytes, int, float, bool, type(None))):
            return
        seen.add(id(item))
        if torch is not None and isinstance(item, torch.Tensor):
            if item.device.type in device_types:
                found.append(path)
            return
        if isinstance(item, dict):
            for key, sub in item.items():
                walk(sub, f"{path}[{key!r}]")
        elif isinstance(item, (list, tuple, set, frozenset)):
            for i, sub in enumerate(item):
                walk(sub, f"{path}[{i}]")
        elif is_dataclass(item) and not isinstance(item, type):
            for f in fields(item):
                walk(getattr(item, f.name), f"{path}.{f.name}")
        elif hasattr(item, "__dict__") and not isinstance(item, type) and type(item).__module__ != "numpy":
            for name, sub in vars(item).items():
                walk(sub, f"{path}.{name}")

    walk(value, where)
    return found


def _check_parent(when: str) -> None:
    if parent_cuda_initialised():
        raise ZeroGpuViolation(f"the parent process initialised CUDA ({when}); on ZeroGPU only the forked "
                               "child may touch the GPU")


def _seconds(duration: Any, args: tuple, kwargs: dict) -> float:
    if callable(duration):
        duration = duration(*args, **kwargs)
    if duration is None:
        return DEFAULT_DURATION_S
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    return float(duration)


def _error_message(err: BaseException) -> tuple:
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    sent = None
    if isinstance(err, gr.Error):
        with suppress(Exception):  # one that cannot be pickled is sent as its class name, as any other error
            sent = pickle.dumps(err)
    return ("error", type(err).__name__, text, sent)


def _drain(recv, child) -> None:
    """Read and drop what a child asked to stop still sends, until it exits or :data:`DROP_GRACE_S`
    pass: a child blocked on a full pipe (frames it made before the stop) never reaches its next
    yield to see the stop otherwise."""
    deadline = time.monotonic() + DROP_GRACE_S
    while child.is_alive() and time.monotonic() < deadline:
        if recv.poll(0.05):
            try:
                recv.recv_bytes()
            except EOFError:
                return


def _child(task, args_bytes: bytes, conn, stop) -> None:
    """The forked child: run ``task``'s generator, pickling each yield into ``conn``."""
    global _in_child
    _in_child = True
    try:
        args, kwargs = pickle.loads(args_bytes)
        gen = task(*args, **kwargs)
        while True:
            try:
                value = next(gen)
            except StopIteration:
                break
            if stop.is_set():
                gen.close()
                break
            try:
                data = pickle.dumps(("ok", value))
            except Exception as err:  # noqa: BLE001 - spaces reports an unpicklable yield as an error
                conn.send_bytes(pickle.dumps(_error_message(err)))
                gen.close()
                return
            conn.send_bytes(data)
    except BaseException as err:  # noqa: BLE001 - every failure goes to the parent
        conn.send_bytes(pickle.dumps(_error_message(err)))
        return
    conn.send_bytes(pickle.dumps(("end",)))


def _aborted() -> gr.Error:
    return gr.Error(ABORTED, title=WORKER_ERROR, print_exception=False)


def GPU(task=None, *, duration: Any = None, size: str | None = None):
    """``spaces.GPU``'s signature: ``GPU(fn)``, ``GPU(duration=...)(fn)``, ``GPU(size=...)(fn)``.
    Only generator functions are supported (a plain function raises ``NotImplementedError``)."""
    if task is None:
        return lambda fn: GPU(fn, duration=duration, size=size)
    if not inspect.isgeneratorfunction(task):
        raise NotImplementedError("the harness stands in for spaces.GPU on generator functions only")

    @wraps(task)
    def handler(*args, **kwargs):
        if _in_child:
            yield from task(*args, **kwargs)
            return
        _check_parent("before the call")
        from gradio.context import LocalContext

        record = CallRecord(duration_s=_seconds(duration, args, kwargs), request=LocalContext.request.get(None))
        CALLS.append(record)
        _schedule(record)
        args_bytes = pickle.dumps((args, kwargs))  # as spaces' arg queue: an unpicklable argument raises here
        recv, send = _FORK.Pipe(duplex=False)
        stop = _FORK.Event()
        child = _FORK.Process(target=_child, args=(task, args_bytes, send, stop), daemon=True)
        deadline = time.monotonic() + record.duration_s
        child.start()
        send.close()
        record.pid = child.pid
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not recv.poll(left):
                    record.aborted = True
                    child.kill()
                    raise _aborted()
                try:
                    message = pickle.loads(recv.recv_bytes())
                except EOFError:  # the child died without a word
                    raise _aborted() from None
                _check_parent("after unpickling a yield")
                kind = message[0]
                if kind == "end":
                    return
                if kind == "error":
                    _, name, text, gradio_error = message
                    print(text, file=sys.stderr)
                    if gradio_error is not None:
                        raise pickle.loads(gradio_error)
                    raise gr.Error(name, title=WORKER_ERROR, print_exception=False)
                value = message[1]
                on_cuda = tensors_on(value, FORBIDDEN_DEVICES)
                if on_cuda:
                    raise ZeroGpuViolation(f"the child yielded {'/'.join(FORBIDDEN_DEVICES)} tensors to the parent: "
                                           f"{', '.join(on_cuda)}")
                record.yields += 1
                try:
                    yield value
                except GeneratorExit:
                    stop.set()
                    raise
        finally:
            if stop.is_set():
                _drain(recv, child)
            child.join(DROP_GRACE_S)
            if child.is_alive():
                child.kill()
                child.join()
            record.exitcode = child.exitcode
            recv.close()
            _check_parent("after the call")

    handler.zerogpu = None  # type: ignore[attr-defined]  # as spaces marks what it decorated
    return handler


def serve_on_zerogpu(monkeypatch, service) -> None:
    """Make this process a ZeroGPU Space for one test: ``SPACES_ZERO_GPU=true``, a ``spaces`` module
    whose ``GPU`` is this harness's, ``service`` served, and :mod:`petri.web.gpu_executor`'s GPU
    generators (a seed's, a study batch's, a probe read's) decorated again through its own ``spaces_gpu``, with their
    own ``duration`` callables (as at import on a Space); no quota kept; each call placing the model on the CPU
    (:class:`~petri.engine.torch.card_placement.CardPlacement`)."""
    import types

    from petri.web import gpu_executor

    spaces = types.ModuleType("spaces")
    spaces.GPU = GPU  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setattr(gpu_executor, "_served", [service])
    from petri.engine.torch.card_placement import CardPlacement

    # each call places the model (here: where it is, on the CPU), also for an app made after this
    monkeypatch.setattr(gpu_executor, "_placement", [CardPlacement("cpu")])
    monkeypatch.setattr(gpu_executor, "zerogpu_placement", lambda lm, size="xlarge": CardPlacement("cpu"))
    monkeypatch.setattr(gpu_executor, "_size", ["large"])  # the tests' quotas are worked for half a card
    serve = gpu_executor.serve  # an app made after this serves the same way (half a card, placed on the CPU)
    monkeypatch.setattr(gpu_executor, "serve", lambda service, duration_s=None, placement=None, size="large":
                        serve(service, duration_s, CardPlacement("cpu"), "large"))
    for name, call in zip(("zerogpu_seed", "zerogpu_batch", "zerogpu_read"), gpu_executor.decorated_calls("large")):
        monkeypatch.setattr(gpu_executor, name, call)
    monkeypatch.setattr(QUOTA, "left_s", None)
    CALLS.clear()


def stall_seed_after_step(monkeypatch, step: int, seconds: float = 60.0) -> None:
    """Make every seed's sampling stop for ``seconds`` after its step ``step`` (in the child, which
    has the patch: it is made before the fork), so a call with a shorter ``duration`` is aborted there."""
    import time

    from petri.web import gpu_executor

    real = gpu_executor.sample_planned

    def stalls(lm, plan, index, on_step=None, cancel=None):
        def seen(s):
            on_step(s)
            if s.index == step:
                time.sleep(seconds)

        return real(lm, plan, index, on_step=seen, cancel=cancel)

    monkeypatch.setattr(gpu_executor, "sample_planned", stalls)
