"""The ``/api`` routes (OpenAPI docs at ``/docs``); each gets the service with ``Depends``.

- ``POST /api/seed``: concepts, one event or a list of events (with group labels), a template,
  samples, sampler settings, a seed → run id, model, per-sample anchor layout, final text, steps,
  flips, segments, preservation, per-pair instability, timings; the per-step argmax on request.
- ``GET /api/runs`` (recent runs), ``GET /api/runs/{run_id}`` and
  ``GET /api/runs/{run_id}/{table}.csv`` (``positions``, ``segments``, ``samples``, ``pairs``):
  stored results, recomputed from the stored trajectories.
- ``POST /api/study``: a study (the study-file schema), samples, settings, a seed → the study run
  (resumable: posting the same body again resumes an interrupted run from the run store).
- ``GET /api/health``: model, device, dtype, whether a job is running, and the request limits.

Sampling runs in a worker thread, so the server stays responsive; with ``busy_wait_s`` > 0 at most
``MAX_QUEUED + 1`` API model jobs are in flight (one running and :data:`~petri.web.limits.MAX_QUEUED`
waiting for the lock, or ``MAX_QUEUED + 1`` waiting while the UI holds the model), so waiting
requests never take every worker thread. The server never loads a model or reads a file named by a
request: unknown fields are refused, run ids are checked with :func:`~petri.runs.store.check_run_id` and
tables come from a fixed list.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse

from petri.core.cancel import Cancelled, CancelToken
from petri.runs.export import token_decoder
from petri.runs.formats import FORMATS, RUN_TABLES, run_table, table_bytes, table_format
from petri.app.service import BusyError, PetriService
from petri.runs.store import check_run_id
from petri.web import limits
from petri.web.access import Caller, get_caller
from petri.web.errors import POST_RESPONSES, StrictJsonRoute, FieldError, busy_error
from petri.web.gpu import run_seed, run_study_job
from petri.web.api.requests import SeedRequest, StudyRequest, prepare_seed, prepare_study
from petri.web.api.responses import HealthOut, QueueOut, RunOut, StudyOut, csv_links, event_summary, model_out

#: How often a synchronous request checks whether its client is still there (seconds).
DISCONNECT_POLL_S = 0.2

RunId = Annotated[str, PathParam(description="a run id: 8-64 lowercase hex characters", max_length=64)]
TableName = Annotated[str, PathParam(description=f"one of {', '.join(RUN_TABLES)}", max_length=32)]
FormatName = Annotated[str, PathParam(description=f"one of {', '.join(FORMATS)}", max_length=16)]


class JobGate:
    """The API's model jobs: each runs in a worker thread; while the model is taken a job waits for
    it (up to ``busy_wait_s``) only while at most :data:`~petri.web.limits.MAX_QUEUED` API model jobs
    are in flight (running or waiting), else it is refused with 503 (+ ``Retry-After``). Used from
    the event-loop thread only."""

    def __init__(self, service: PetriService, busy_wait_s: float = 0.0):
        self.service, self.busy_wait_s = service, busy_wait_s
        self.in_flight = 0  # jobs running or waiting for the lock

    async def run(self, client: Request, fn: Callable, *args, **kwargs):
        """``fn(*args, cancel=token, **kwargs)`` in a worker thread; if ``client`` disconnects
        first, the token is cancelled, so the model is free again within one denoising step."""
        if self.service.busy and (self.busy_wait_s <= 0 or self.in_flight > limits.MAX_QUEUED):
            waiting = f" and {self.in_flight} API requests are running or waiting for it" if self.busy_wait_s > 0 else ""
            raise busy_error(BusyError(f"a model job is already running{waiting}"))
        self.in_flight += 1
        token = CancelToken()
        work = asyncio.ensure_future(run_in_threadpool(functools.partial(fn, *args, cancel=token, **kwargs)))
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

router = APIRouter(route_class=StrictJsonRoute)


@router.get("/api/health", response_model=HealthOut, tags=["api"])
async def health(service: Service, caller: Client) -> HealthOut:
    # async: answered on the event loop, so it never waits for a worker thread
    info = service.lm.describe()
    current = service.jobs.current
    queue = QueueOut(running=current.job_id if current is not None and caller.may_see(current.owner) else None,
                     queued=service.jobs.queued, max_queued=service.jobs.max_queued,
                     sync_max_token_steps=limits.SYNC_MAX_TOKEN_STEPS)
    return HealthOut(
        status="ok", model_id=info["model_id"], device=info["device"], dtype=info["dtype"],
        canvas_length=info["canvas_length"], busy=service.busy, limits=limits.LIMITS, queue=queue,
        public=caller.public,
    )


@router.post("/api/seed", response_model=RunOut, response_model_exclude_none=False, tags=["api"],
             responses=POST_RESPONSES)
async def seed(request: SeedRequest, service: Service, jobs: Jobs, caller: Client, client: Request,
               response: Response) -> RunOut:
    """Sample every event (one batch of ``samples`` per event) with the concepts pinned, while the
    client waits (a client that disconnects cancels it within one step). Work over
    ``SYNC_MAX_TOKEN_STEPS`` (see ``/api/health``) is refused: submit it as ``POST /api/jobs/seed``."""
    events, settings = prepare_seed(request, service.lm)
    check_sync_budget(len(events), request.samples, settings.max_denoising_steps, service.lm.canvas_length)
    caller = caller.for_submission()
    caller.hand_out(response)
    result = await jobs.run(client, run_seed, service, events, request.samples, settings, request.seed, None,
                            jobs.busy_wait_s, owner=caller.owner)
    summaries = [
        event_summary(i, traj, group, request.include_trajectories)
        for i, (traj, group) in enumerate(zip(result.trajectories, result.groups))
    ]
    run = service.store.get_run(result.run_id) or {}
    return RunOut(
        run_id=result.run_id,
        status=run.get("status", "done"),
        model=model_out(service.lm),
        settings=settings.to_dict(),
        events=summaries,
        timings={
            "wall_s": result.wall_s,
            "sampling_s": float(sum(t.timings.get("total_s", 0.0) for t in result.trajectories)),
        },
        csv=csv_links(result.run_id),
        created_at=run.get("created_at"),
        finished_at=run.get("finished_at"),
    )


def check_sync_budget(events: int, samples: int, steps: int, canvas: int) -> None:
    """Refuse (422, naming the budget) a synchronous seed over ``limits.SYNC_MAX_TOKEN_STEPS``."""
    work = events * samples * steps * canvas
    if work > limits.SYNC_MAX_TOKEN_STEPS:
        raise FieldError(
            ["body", "samples"],
            f"{events} events × {samples} samples × {steps} steps × {canvas} canvas positions = {work:,} "
            f"token-steps is more than a synchronous request may ask for ({limits.SYNC_MAX_TOKEN_STEPS:,}); "
            "submit it as a job with POST /api/jobs/seed (same body) and follow its events_url",
            kind="sync_budget_exceeded", budget=limits.SYNC_MAX_TOKEN_STEPS, work=work,
        )


@router.post("/api/study", response_model=StudyOut, tags=["api"], responses=POST_RESPONSES)
async def study(request: StudyRequest, service: Service, jobs: Jobs, caller: Client, client: Request,
                response: Response) -> StudyOut:
    """Run a study (events × templates × ``samples``) on the served model. Every finished (event,
    template) batch is committed to the run store before the next starts; the run id derives from
    the study, model, settings, samples and seed, so posting the same body again resumes an
    interrupted run (or returns a finished one at once). Tables: ``GET /api/runs/{run_id}``."""
    parsed, settings, templates = prepare_study(request, service.lm)
    caller = caller.for_submission()
    caller.hand_out(response)
    result = await jobs.run(client, run_study_job, service, parsed, request.samples, request.seed, settings, templates,
                            jobs.busy_wait_s, owner=caller.owner)
    return StudyOut(
        run_id=result.run_id,
        status="done",
        study_id=parsed.id,
        model=model_out(service.lm),
        settings=settings.to_dict(),
        samples=result.samples,
        seed=result.seed,
        templates=list(result.template_ids),
        batches=len(result.batches),
        computed=result.computed,
        resumed=result.resumed,
        timings={k: float(v) for k, v in result.timings.items()},
        csv=csv_links(result.run_id),
    )


def _load_run(service: PetriService, run_id: str, caller: Caller) -> tuple[dict, list]:
    """A stored run the caller may see, and its events, or 404 naming the run id."""
    try:
        check_run_id(run_id)
    except ValueError:
        raise HTTPException(404, detail=f"run_id: no run {run_id[:80]!r} (run ids are 8-64 lowercase hex characters)") from None
    run = service.store.get_run(run_id)
    if run is None or not caller.may_open(service.store, run_id):
        raise HTTPException(404, detail=f"run_id: no run {run_id!r}")
    return run, service.store.load_events(run_id)


@router.get("/api/runs", tags=["api"])
def list_runs(service: Service, caller: Client, limit: int = Query(20, ge=1, le=200)) -> list[dict]:
    """The most recent runs (id, kind, model, status, times, events stored); on a public server,
    only the caller's own (401 without a token)."""
    caller.require_identity()
    keys = ("run_id", "kind", "model_id", "status", "created_at", "finished_at", "events_stored", "error")
    runs = service.store.list_owned_runs(caller.owner, limit) if caller.public else service.store.list_runs(limit)
    return [{k: r.get(k) for k in keys} for r in runs]


@router.get("/api/runs/{run_id}", response_model=RunOut, tags=["api"])
def get_run(run_id: RunId, service: Service, caller: Client, include_trajectories: bool = False) -> RunOut:
    """A stored run, every number recomputed from its stored trajectories."""
    run, stored = _load_run(service, run_id, caller)
    trajectories = [t for _, _, t in stored]
    first = trajectories[0] if trajectories else None
    cells = sum(t.argmax.size for t in trajectories)
    if include_trajectories and cells > limits.MAX_TRAJECTORY_CELLS:
        raise FieldError(["query", "include_trajectories"],
                         f"{cells:,} argmax values is more than one response carries ({limits.MAX_TRAJECTORY_CELLS:,})")
    return RunOut(
        run_id=run_id,
        kind=run["kind"],
        status=run["status"],
        model=model_out(service.lm, run["model_id"], first.device if first else None),
        settings=first.settings.to_dict() if first else run["request"].get("settings", {}),
        events=[event_summary(i, t, g, include_trajectories) for i, (_, g, t) in enumerate(stored)],
        timings={"sampling_s": float(sum(t.timings.get("total_s", 0.0) for t in trajectories))},
        csv=csv_links(run_id),
        created_at=run["created_at"],
        finished_at=run["finished_at"],
        error=run["error"],
    )


@router.get("/api/runs/{run_id}/{table}.{fmt}", tags=["api"], response_class=Response,
            responses={200: {"content": {f.media_type.split(";")[0]: {} for f in FORMATS.values()}}})
def get_table(run_id: RunId, table: TableName, fmt: FormatName, service: Service, caller: Client) -> Response:
    """A table of a stored run in a registered format (:mod:`petri.runs.formats`): the tidy
    ``positions``, ``segments``, ``samples``, ``pairs`` or the per-step record ``steps``, as ``csv``
    (streamed one event, or one sample of the steps, at a time; formula-leading text neutralised) or
    ``parquet``. Token text comes from the served model's tokenizer; a run another model made gets
    empty token texts, and the ``X-Petri-Token-Text`` header says why."""
    try:
        run_table(table)
        writer = table_format(fmt)
    except ValueError as err:
        raise HTTPException(404, detail=str(err)) from None
    run, stored = _load_run(service, run_id, caller)
    if not stored:
        raise HTTPException(404, detail=f"run_id: run {run_id!r} has no stored events (status {run['status']})")
    trajectories = [t for _, _, t in stored]
    decode = token_decoder(getattr(service.lm, "tokenizer", None), service.lm.model_id, trajectories)
    made_by = ", ".join(sorted({t.model_id for t in trajectories}))
    note = ("decoded with the served model's tokenizer" if decode is not None
            else f"empty: the run was made by {made_by}, the server holds {service.lm.model_id}")
    headers = {"Content-Disposition": f'attachment; filename="{run_id}-{table}.{fmt}"', "X-Petri-Token-Text": note}
    body = table_bytes(trajectories, table, fmt, [g for _, g, _ in stored], decode)
    if writer.streams:  # a sync generator runs in a worker thread: never the whole table in memory
        return StreamingResponse(body, media_type=writer.media_type, headers=headers)
    return Response(b"".join(body), media_type=writer.media_type, headers=headers)
