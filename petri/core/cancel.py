"""Cancelling long work: a token the owner of a job sets and the sampler checks once per step.

The sampler (any engine) calls :meth:`CancelToken.check` at the start of every denoising step, on
the host, so a cancelled job stops within one step and no GPU synchronisation is added. Whoever
catches :class:`Cancelled` decides what the stopped work becomes: a user's cancel (``cancelled``),
a client that left (``cancelled``), or a server shutting down (``interrupted``, resumable).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: The reasons a job can be stopped with; each is also the job's final status.
REASONS = ("cancelled", "interrupted")


class Cancelled(Exception):
    """Raised inside work whose token was cancelled; ``reason`` is ``cancelled`` or ``interrupted``."""

    def __init__(self, reason: str = "cancelled"):
        super().__init__(f"the job was {reason}")
        self.reason = reason


class CancelToken:
    """Thread-safe: any thread may :meth:`cancel`; the worker calls :meth:`check` between steps.
    The first reason given is kept.

    ``heartbeat``, when set, is called by every :meth:`check` (once per denoising step): the owner
    of a job counts steps with it, for progress, at no cost on the device.
    """

    def __init__(self, heartbeat: Callable[[], None] | None = None) -> None:
        self._event = threading.Event()
        self._reason: str | None = None
        self._lock = threading.Lock()
        self.heartbeat = heartbeat

    def cancel(self, reason: str = "cancelled") -> None:
        if reason not in REASONS:
            raise ValueError(f"reason {reason!r} is not one of {REASONS}")
        with self._lock:
            if self._reason is None:
                self._reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        return self._reason

    def check(self) -> None:
        """Raise :class:`Cancelled` if the token was cancelled (after the heartbeat, if any)."""
        if self.heartbeat is not None:
            self.heartbeat()
        if self._event.is_set():
            raise Cancelled(self._reason or "cancelled")


def acquire_or_cancel(lock: threading.Lock, token: CancelToken | None, timeout: float | None = None) -> bool:
    """Acquire ``lock``, waiting in slices of at most 0.1 s so that a cancel of ``token`` during the
    wait raises :class:`Cancelled` within one slice. ``timeout``: seconds to wait at most (``None``:
    no limit); returns False when it expires without the lock, True once held."""
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    while not lock.acquire(blocking=False):
        if token is not None:
            token.check()
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        if lock.acquire(timeout=0.1 if remaining is None else min(0.1, remaining)):
            return True
    return True
