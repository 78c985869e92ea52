"""The job routes: long work submitted, watched, cancelled (``/api/jobs``).

- ``POST /api/jobs/seed`` (a seed request's body) and ``POST /api/jobs/study`` (a study request's
  body): checked exactly as the synchronous routes check them, then queued; ``202`` with
  ``job_id``, ``status_url`` and ``events_url`` (and, on a public server, the caller's ``token``).
  A full queue is a ``503`` with ``Retry-After``.
- ``GET /api/jobs``: the caller's jobs, newest first (``limit``, ``offset``).
- ``GET /api/jobs/{job_id}``: status (queued, running, done, failed, cancelled, interrupted),
  progress (``done``/``total`` ``unit``: steps of a dish, batches of a study), the run id, times.
- ``GET /api/jobs/{job_id}/events``: a server-sent-event stream: ``state`` (now), then
  ``progress`` and ``status`` events, and last ``end`` with the final state.
- ``DELETE /api/jobs/{job_id}``: cancel (idempotent). A queued job never starts; a running one
  stops within one denoising step; a study's stored batches stay, so it resumes when submitted again.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse

from petri.app.jobs import Job, JobNotFound, QueueFull
from petri.app.service import PetriService
from petri.web import limits
from petri.web.access import Caller
from petri.web.api.deps import Client, Service
from petri.web.api.requests import SeedRequest, StudyRequest, prepare_seed, prepare_study
from petri.web.api.responses import JobList, JobOut, JobSubmitted
from petri.web.errors import POST_RESPONSES, StrictJsonRoute

#: Seconds between comment lines that keep an idle event stream open through proxies.
KEEPALIVE_S = 15.0

JobId = Annotated[str, PathParam(description="a job id (32 lowercase hex characters)", max_length=64)]

router = APIRouter(prefix="/api/jobs", tags=["jobs"], route_class=StrictJsonRoute)

SUBMIT_RESPONSES = {**POST_RESPONSES, 503: {"description": "the job queue is full, or the server is stopping (Retry-After)"}}


def _submitted(job: Job, caller: Caller, response: Response) -> JobSubmitted:
    caller.hand_out(response)
    base = f"/api/jobs/{job.job_id}"
    return JobSubmitted(job_id=job.job_id, status_url=base, events_url=f"{base}/events",
                        token=caller.token if caller.public else None)


def _submit(submit, *args, **kwargs) -> Job:
    try:
        return submit(*args, **kwargs)
    except QueueFull as err:
        raise HTTPException(503, detail=f"busy: {err}; retry later", headers={"Retry-After": str(limits.RETRY_AFTER_S)}) from None
    except RuntimeError as err:  # the queue is shutting down
        raise HTTPException(503, detail=f"unavailable: {err}", headers={"Retry-After": str(limits.RETRY_AFTER_S)}) from None


@router.post("/seed", status_code=202, response_model=JobSubmitted, responses=SUBMIT_RESPONSES)
def submit_seed(request: SeedRequest, service: Service, caller: Client, response: Response) -> JobSubmitted:
    """Queue a seed (the body of ``POST /api/seed``, with no size budget beyond the request limits)."""
    plan = prepare_seed(request, service.lm)
    caller = caller.for_submission()
    job = _submit(service.submit_seed, plan, owner=caller.owner)
    return _submitted(job, caller, response)


@router.post("/study", status_code=202, response_model=JobSubmitted, responses=SUBMIT_RESPONSES)
def submit_study(request: StudyRequest, service: Service, caller: Client, response: Response) -> JobSubmitted:
    """Queue a study (the body of ``POST /api/study``); submitting the same study again after a
    cancel or an interruption resumes it from the stored batches."""
    plan = prepare_study(request, service.lm)
    caller = caller.for_submission()
    job = _submit(service.submit_study, plan, owner=caller.owner)
    return _submitted(job, caller, response)


def _visible(service: PetriService, job_id: str, caller: Caller) -> dict:
    """The job's public state if the caller may see it; 401 without a token on a public server,
    else 404 (another caller's job is not confirmed to exist)."""
    caller.require_identity()
    job = service.jobs.get(job_id)
    state = {**job.public(), "owner": job.owner} if job is not None else service.stored_job(job_id)
    if state is None or not caller.may_see(state["owner"]):
        raise HTTPException(404, detail=f"job_id: no job {job_id[:80]!r}")
    return state


def _out(state: dict) -> JobOut:
    return JobOut(**{k: v for k, v in state.items() if k != "owner"})


@router.get("", response_model=JobList)
def list_jobs(service: Service, caller: Client, limit: int = Query(20, ge=1, le=200),
              offset: int = Query(0, ge=0, le=1_000_000)) -> JobList:
    """Jobs newest first: all of them on a local server, the caller's own on a public one (401
    without a token)."""
    caller.require_identity()
    rows = service.stored_jobs(caller.owner, limit, offset, any_owner=not caller.public)
    live = {job.job_id: job for job in service.jobs}
    jobs = [_out({**live[r["job_id"]].public()} if r["job_id"] in live else r) for r in rows]
    return JobList(jobs=jobs, limit=limit, offset=offset)


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: JobId, service: Service, caller: Client) -> JobOut:
    """A job's status and progress."""
    return _out(_visible(service, job_id, caller))


@router.delete("/{job_id}", response_model=JobOut)
def cancel_job(job_id: JobId, service: Service, caller: Client) -> JobOut:
    """Cancel a job (idempotent): a queued job never starts; a running one stops within one step
    (its status reads ``cancelled`` once it has)."""
    state = _visible(service, job_id, caller)
    try:
        job = service.jobs.cancel(job_id)
    except JobNotFound:  # a job of an earlier process: already final (or marked interrupted)
        return _out(state)
    return _out(job.public())


@router.get("/{job_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def job_events(job_id: JobId, service: Service, caller: Client, client: Request) -> StreamingResponse:
    """Server-sent events: ``state`` first (so a late subscriber starts from now), then
    ``progress`` / ``status`` as they happen, and ``end`` with the final state."""
    state = _visible(service, job_id, caller)
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue = asyncio.Queue()
    try:
        unsubscribe = service.jobs.subscribe(job_id, lambda event: loop.call_soon_threadsafe(inbox.put_nowait, event))
    except JobNotFound:  # a job of an earlier process: its stored state is final
        public = {k: v for k, v in state.items() if k != "owner"}
        for event in ({"event": "state", "job": public}, {"event": "end", "job": public}):
            inbox.put_nowait(event)
        unsubscribe = None

    async def stream():
        try:
            while True:
                try:
                    event = await asyncio.wait_for(inbox.get(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    if await client.is_disconnected():
                        return
                    yield ": keep-alive\n\n"
                    continue
                yield f"event: {event['event']}\ndata: {json.dumps(event['job'])}\n\n"
                if event["event"] == "end":
                    return
        finally:
            if unsubscribe is not None:
                unsubscribe()

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
