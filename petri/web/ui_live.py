"""Running one model job for a UI event handler (a generator) and streaming what it reports.

:func:`stream` runs ``work(emit)`` in a worker thread; each ``emit(payload)`` (the sampler's per-step
callback, the study runner's per-batch progress callback) reaches the handler as
``("progress", payload)``, and the result as ``("done", result)``; an exception in the job is
re-raised in the handler. ``cancel`` (a :class:`threading.Event`) is the hook a Cancel button sets:
the next ``emit`` raises :class:`JobCancelled` inside the job, which the sampler and the study
runner let through (the study's stored batches stay). The Dish, Compare and Study tabs run their
jobs through here, so moving them onto a job system changes this one function.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any


class JobCancelled(RuntimeError):
    """The user cancelled the job (raised inside the job at its next progress report)."""


def stream(
    work: Callable[[Callable[..., None]], Any],
    *,
    cancel: threading.Event | None = None,
    name: str = "petri-ui-job",
    poll_s: float = 0.5,
) -> Iterator[tuple[str, Any]]:
    """Yield ``("progress", args)`` for each ``emit(*args)`` of ``work(emit)`` (run in a daemon
    thread), then ``("done", result)``. ``args`` is the tuple ``emit`` was called with, or its one
    element. Raises what ``work`` raised."""
    messages: queue.Queue = queue.Queue()

    def emit(*args) -> None:
        if cancel is not None and cancel.is_set():
            raise JobCancelled("cancelled by the user")
        messages.put(("progress", args[0] if len(args) == 1 else args))

    def run() -> None:
        try:
            messages.put(("done", work(emit)))
        except BaseException as err:  # noqa: BLE001 - handed to the generator
            messages.put(("error", err))

    threading.Thread(target=run, daemon=True, name=name).start()
    while True:
        try:
            kind, payload = messages.get(timeout=poll_s)
        except queue.Empty:
            continue
        if kind == "error":
            raise payload
        yield kind, payload
        if kind == "done":
            return
