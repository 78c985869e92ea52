"""Fixtures of the web tests: the module's live server over one service, and a client of it.

A module that serves the API configures them with module attributes: ``SERVICE_OPTIONS`` (keyword
arguments of :class:`~petri.app.service.PetriService`, e.g. ``max_queued_jobs``) and ``SERVE_UI``
(False serves the API alone; the whole app, UI mounted, by default). A test that needs a service
of its own takes ``service`` (tests/conftest.py)."""

from __future__ import annotations

import httpx
import pytest

from petri.app.service import PetriService
from petri.runs.store import RunStore
from petri.web.app import create_app


@pytest.fixture(scope="module")
def served(request, tiny_lm, tmp_path_factory):
    """The service the module's live server serves: the tiny model, a store of the module's own,
    the module's ``SERVICE_OPTIONS``; shut down after the module."""
    service = PetriService(tiny_lm, RunStore(tmp_path_factory.mktemp("served")),
                           **getattr(request.module, "SERVICE_OPTIONS", {}))
    yield service
    service.shutdown()


@pytest.fixture(scope="module")
def server(request, served, live_server):
    """``served`` behind the app on a loopback port, for the module (``.url``)."""
    with live_server(create_app(served, ui=getattr(request.module, "SERVE_UI", True))) as live:
        yield live


@pytest.fixture()
def client(server):
    """An HTTP client of the module's server (60 s timeout)."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
