"""What the API's routers depend on, in one place: the service and the job gate of the app
(``Depends``), the caller, and a stored run the caller may see (:func:`load_run`)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool

from petri.app.service import BusyError, PetriService
from petri.core.cancel import Cancelled, CancelToken
from petri.core.watch import Watch
from petri.runs.store import check_run_id
from petri.web import limits
from petri.web.access import Caller, get_caller
from petri.web.errors import busy_error

#: How often a synchronous request checks whether its client is still there (seconds).
DISCONNECT_POLL_S = 0.2



class JobGate:
    """The API's model jobs: each runs in a worker thread; while the model is taken a job waits for
    it (up to ``busy_wait_s``) only while at most :data:`~petri.web.limits.MAX_QUEUED` API model jobs
    are in flight (running or waiting), else it is refused with 503 (+ ``Retry-After``). Used from
    the event-loop thread only."""

    def __init__(self, service: PetriService, busy_wait_s: float = 0.0):
        self.service, self.busy_wait_s = service, busy_wait_s
        self.in_flight = 0  # jobs running or waiting for the lock

    async def run(self, client: Request, fn: Callable, *args, **kwargs):
        """``fn(*args, watch=Watch(cancel=token), **kwargs)`` in a worker thread; if ``client``
        disconnects first, the token is cancelled, so the model is free again within one denoising step."""
        if self.service.busy and (self.busy_wait_s <= 0 or self.in_flight > limits.MAX_QUEUED):
            waiting = f" and {self.in_flight} API requests are running or waiting for it" if self.busy_wait_s > 0 else ""
            raise busy_error(BusyError(f"a model job is already running{waiting}"))
        self.in_flight += 1
        token = CancelToken()
        work = asyncio.ensure_future(run_in_threadpool(functools.partial(fn, *args, watch=Watch(cancel=token), **kwargs)))
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=DISCONNECT_POLL_S)
                if not work.done() and not token.cancelled and await client.is_disconnected():
                    token.cancel("cancelled")
            return work.result()
        except BusyError as err:
            raise busy_error(err) from None
        except Cancelled as stop:
            if stop.reason == "interrupted":
                raise HTTPException(503, detail="interrupted: the server is shutting down; the run stopped "
                                    "(a study resumes when posted again)", headers={"Retry-After": str(limits.RETRY_AFTER_S)}) from None
            raise HTTPException(499, detail="cancelled: the client disconnected") from None
        finally:
            self.in_flight -= 1


# async: resolved on the event loop, so a route never waits for a worker thread to learn its service
async def get_service(request: Request) -> PetriService:
    """The app's service (``app.state.service``, set by :func:`petri.web.app.create_app`)."""
    return request.app.state.service


async def get_jobs(request: Request) -> JobGate:
    """The app's job gate (``app.state.jobs``)."""
    return request.app.state.jobs


Service = Annotated[PetriService, Depends(get_service)]
Jobs = Annotated[JobGate, Depends(get_jobs)]
Client = Annotated[Caller, Depends(get_caller)]

RunId = Annotated[str, PathParam(description="a run id: 8-64 lowercase hex characters", max_length=64)]


def load_run(service: PetriService, run_id: str, caller: Caller) -> tuple[dict, list]:
    """A stored run the caller may see, and its events, or 404 naming the run id."""
    try:
        check_run_id(run_id)
    except ValueError:
        raise HTTPException(404, detail=f"run_id: no run {run_id[:80]!r} (run ids are 8-64 lowercase hex characters)") from None
    run = service.get_run(run_id)
    if run is None or not caller.may_open(service, run_id):
        raise HTTPException(404, detail=f"run_id: no run {run_id!r}")
    return run, service.load_events(run_id)


def stored_run(service: PetriService, run_id: str, caller: Caller) -> tuple[dict, list]:
    """A stored run the caller may see and its events (:func:`load_run`), or 404 naming the run where
    it stored no event."""
    run, stored = load_run(service, run_id, caller)
    if not stored:
        raise HTTPException(404, detail=f"run_id: run {run_id!r} has no stored events (status {run['status']})")
    return run, stored


def stored_events(service: PetriService, run_id: str, caller: Caller) -> tuple[list, list]:
    """(trajectories, groups) of a stored run the caller may see (:func:`stored_run`)."""
    _, stored = stored_run(service, run_id, caller)
    return [t for _, _, t in stored], [g for _, g, _ in stored]


def served_tokenizer(service: PetriService, trajectories: list) -> tuple[object | None, str]:
    """(tokenizer, note): the served model's tokenizer when that model made every trajectory, else
    None (a stored run of another model: its token texts are left empty); the note says which, for the
    ``X-Petri-Token-Text`` header."""
    tokenizer = getattr(service.lm, "tokenizer", None)
    made_by = {t.model_id for t in trajectories}
    if tokenizer is not None and made_by <= {service.model_id}:
        return tokenizer, "decoded with the served model's tokenizer"
    return None, f"empty: the run was made by {', '.join(sorted(made_by))}, the server holds {service.model_id}"
