"""The ``/api`` routes (OpenAPI docs at ``/docs``); each gets the service with ``Depends``.

- ``POST /api/seed``: concepts, one event or a list of events (with group labels), a template,
  samples, sampler settings, a seed → run id, model, per-sample anchor layout, final text, steps,
  flips, segments, preservation, per-pair instability, timings; the per-step argmax on request.
- (the stored runs, ``/api/runs``, are :mod:`petri.web.api.runs`; jobs, ``/api/jobs``, :mod:`petri.web.api.jobs`)
- ``POST /api/study``: a study (the study-file schema), samples, settings, a seed → the study run
  (resumable: posting the same body again resumes an interrupted run from the run store).
- ``GET /api/health``: model, device, dtype, whether a job is running, and the request limits.

Sampling runs in a worker thread, so the server stays responsive; with ``busy_wait_s`` > 0 at most
``MAX_QUEUED + 1`` API model jobs are in flight (one running and :data:`~petri.web.limits.MAX_QUEUED`
waiting for the lock, or ``MAX_QUEUED + 1`` waiting while the UI holds the model), so waiting
requests never take every worker thread. The server never loads a model or reads a file named by a
request: unknown fields are refused.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from petri.web import limits
from petri.web.api.answers import check_sync_budget, seed_answer, study_answer
from petri.web.api.deps import Client, Jobs, Service
from petri.web.api.requests import SeedRequest, StudyRequest, prepare_seed, prepare_study
from petri.web.api.responses import HealthOut, QueueOut, RunOut, StudyOut
from petri.web.errors import POST_RESPONSES, StrictJsonRoute
from petri.web.gpu import run_seed, run_study_job

router = APIRouter(prefix="/api", route_class=StrictJsonRoute)


@router.get("/health", response_model=HealthOut, tags=["api"])
async def health(service: Service, caller: Client) -> HealthOut:
    # async: answered on the event loop, so it never waits for a worker thread
    info = service.model_info()
    current = service.jobs.current
    queue = QueueOut(running=current.job_id if current is not None and caller.may_see(current.owner) else None,
                     queued=service.jobs.queued, max_queued=service.jobs.max_queued,
                     sync_max_token_steps=limits.SYNC_MAX_TOKEN_STEPS)
    return HealthOut(
        status="ok", model_id=info["model_id"], device=info["device"], dtype=info["dtype"],
        canvas_length=info["canvas_length"], busy=service.busy, limits=limits.LIMITS, queue=queue,
        public=caller.public,
    )


@router.post("/seed", response_model=RunOut, response_model_exclude_none=False, tags=["api"],
             responses=POST_RESPONSES)
async def seed(request: SeedRequest, service: Service, jobs: Jobs, caller: Client, client: Request,
               response: Response) -> RunOut:
    """Sample every event (one batch of ``samples`` per event) with the concepts pinned, while the
    client waits (a client that disconnects cancels it within one step). Work over
    ``SYNC_MAX_TOKEN_STEPS`` (see ``/api/health``) is refused: submit it as ``POST /api/jobs/seed``."""
    plan = prepare_seed(request, service.lm)
    check_sync_budget(len(plan.events), plan.samples, plan.settings.max_denoising_steps, service.canvas_length)
    caller = caller.for_submission()
    caller.hand_out(response)
    result = await jobs.run(client, run_seed, service, plan, wait_s=jobs.busy_wait_s, owner=caller.owner)
    return seed_answer(service, plan, result, request.include_trajectories)


@router.post("/study", response_model=StudyOut, tags=["api"], responses=POST_RESPONSES)
async def study(request: StudyRequest, service: Service, jobs: Jobs, caller: Client, client: Request,
                response: Response) -> StudyOut:
    """Run a study (events × templates × ``samples``) on the served model. Every finished (event,
    template) batch is committed to the run store before the next starts; the run id derives from
    the study, model, settings, samples and seed, so posting the same body again resumes an
    interrupted run (or returns a finished one at once). Tables: ``GET /api/runs/{run_id}``."""
    plan = prepare_study(request, service.lm)
    caller = caller.for_submission()
    caller.hand_out(response)
    result = await jobs.run(client, run_study_job, service, plan, wait_s=jobs.busy_wait_s, owner=caller.owner)
    return study_answer(service, plan, result)
