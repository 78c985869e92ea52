"""Helpers of the tests that drive a :class:`~petri.app.service.PetriService` (the ``service``
fixture is in tests/conftest.py)."""

from __future__ import annotations

import threading
from contextlib import contextmanager


@contextmanager
def model_held(service):
    """Hold ``service``'s one-job lock from another thread for the duration of the ``with`` block,
    as a long job would."""
    entered, release = threading.Event(), threading.Event()

    def hold():
        with service.exclusive():
            entered.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(10), "the holder thread never got the lock"
        yield
    finally:
        release.set()
        holder.join()
