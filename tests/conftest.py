"""Fixtures shared by every folder (a tiny random DiffusionGemma, built in-process, no files, or
saved as a checkpoint folder; a service over it; a live server) and the markers every test gets from where it lies
(tests/markers_support.py). A folder's own fixtures are in its conftest.py (tests/web/conftest.py).

    python -m pytest -q                                     # everything (the README's command, CI)
    python -m pytest -q -m "not browser and not process"    # the fast loop
"""

from __future__ import annotations

from pathlib import Path

import pytest

from markers_support import TESTS, markers_for
from petri.engine.torch.tiny import tiny_random_model


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            relative = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
        except ValueError:
            continue
        for mark in markers_for(relative):
            item.add_marker(mark)


@pytest.fixture(scope="session")
def tiny_lm():
    """A 2-layer random DiffusionGemma with a 16-token canvas and a 384-token BPE vocabulary."""
    return tiny_random_model(canvas_length=16)


@pytest.fixture(scope="module")
def checkpoint(request, tmp_path_factory):
    """A tiny random DiffusionGemma saved as a checkpoint folder (what the CLI loads), for the
    module: its ``CHECKPOINT`` attribute gives ``canvas_length``, ``seed`` (both of
    :func:`~petri.engine.torch.tiny.tiny_random_model`) and ``name`` (the folder's, which is the
    model id; default a 16-token canvas, seed 1, ``tiny-ckpt``)."""
    from tiny_support import save_checkpoint

    options = {"canvas_length": 16, "seed": 1, "name": "tiny-ckpt", **getattr(request.module, "CHECKPOINT", {})}
    lm = tiny_random_model(canvas_length=options["canvas_length"], seed=options["seed"])
    return save_checkpoint(lm, tmp_path_factory.mktemp("ckpt") / options["name"])


@pytest.fixture(scope="session")
def confident_lm():
    """Like ``tiny_lm`` but with a sharpened output head, so entropies get low enough for the
    adaptive stop to fire at different steps in different samples."""
    import torch

    lm = tiny_random_model(canvas_length=16)
    with torch.no_grad():
        lm.model.lm_head.weight.mul_(8.0)
    return lm


class LiveServer:
    """uvicorn serving an ASGI ``app`` in a thread on a free loopback port (``url``)."""

    def __init__(self, app):
        import socket
        import threading

        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LiveServer:
        import time

        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture()
def service(tiny_lm, tmp_path):
    """A :class:`~petri.app.service.PetriService` over ``tiny_lm`` and a fresh store of the test's own,
    shut down after the test."""
    from petri.app.service import PetriService
    from petri.runs.store import RunStore

    service = PetriService(tiny_lm, RunStore(tmp_path / "store"))
    yield service
    service.shutdown()


@pytest.fixture(scope="session")
def live_server():
    """``live_server(app)``: a context manager serving ``app`` on 127.0.0.1 (random free port)."""
    return LiveServer


@pytest.fixture()
def count_calls(monkeypatch):
    """``count_calls(module, name)`` → a list that grows by one each time ``module.name`` is called
    (the function still runs; the module's attribute is restored after the test)."""

    def install(module, name: str) -> list:
        calls, original = [], getattr(module, name)

        def counting(*args, **kwargs):
            calls.append(1)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
        return calls

    return install
