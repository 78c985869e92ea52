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
from petri.web.api.deps import Client, Jobs, Service
from petri.web.api.requests import SeedRequest, StudyRequest, prepare_seed, prepare_study
from petri.web.api.responses import HealthOut, QueueOut, RunOut, StudyOut, csv_links, event_summary, model_out
from petri.web.errors import POST_RESPONSES, FieldError, StrictJsonRoute
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
    summaries = [
        event_summary(i, traj, group, request.include_trajectories)
        for i, (traj, group) in enumerate(zip(result.trajectories, result.groups))
    ]
    run = service.get_run(result.run_id) or {}
    return RunOut(
        run_id=result.run_id,
        status=run.get("status", "done"),
        model=model_out(service.model_info()),
        settings=plan.settings.to_dict(),
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
    return StudyOut(
        run_id=result.run_id,
        status="done",
        study_id=plan.study.id,
        model=model_out(service.model_info()),
        settings=result.settings.to_dict(),
        samples=result.samples,
        seed=result.seed,
        templates=list(result.template_ids),
        batches=len(result.batches),
        computed=result.computed,
        resumed=result.resumed,
        timings={k: float(v) for k, v in result.timings.items()},
        csv=csv_links(result.run_id),
    )
