"""The answers of the API's GPU routes, and the synchronous seed's budget: one definition each, shared by
the FastAPI routes (:mod:`petri.web.api.routes`) and, on ZeroGPU, the Gradio endpoints that do their work
(:mod:`petri.web.ui.api_endpoints`), so both answer the same JSON."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from petri.app.probe import ProbeRun
from petri.app.service import SeedResult
from petri.core.plan import SeedPlan
from petri.runs.probe_results import PROBE_KIND
from petri.web import limits
from petri.web.api.responses import ModelOut, RunOut, StudyOut, csv_links, event_summary, model_out
from petri.web.errors import FieldError


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


def seed_answer(service, plan: SeedPlan, result: SeedResult, include_trajectories: bool) -> RunOut:
    """``POST /api/seed``'s answer for ``result``, the seed of ``plan`` (also the answer of the
    ZeroGPU Gradio endpoint ``/seed``, :mod:`petri.web.ui.api_endpoints`)."""
    summaries = [
        event_summary(i, traj, group, include_trajectories)
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


def study_answer(service, plan, result) -> StudyOut:
    """``POST /api/study``'s answer for ``result``, the run of ``plan`` (a :class:`~petri.study.plan.StudyPlan`)
    (also the answer of the ZeroGPU Gradio endpoint ``/study``, :mod:`petri.web.ui.api_endpoints`)."""
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


class ProbeOut(BaseModel):
    """A stored slot read."""

    run_id: str
    kind: str = PROBE_KIND
    status: str
    model: ModelOut
    read: dict[str, Any] = Field(description="request, reads (question, step, alternatives, probs, mass, entropy, "
                                             "top_k, draws, answer), skipped, final, seconds")
    timings: dict[str, float]
    csv: dict[str, str] = Field(description="download links of the run's tables")


def probe_answer(service, done: ProbeRun) -> ProbeOut:
    """``POST /api/probe``'s answer for the stored read ``done`` (also the answer of the ZeroGPU
    Gradio endpoint ``/probe``, :mod:`petri.web.ui.api_endpoints`)."""
    run = service.get_run(done.run_id) or {}
    return ProbeOut(run_id=done.run_id, status=run.get("status", "done"), model=model_out(service.model_info()),
                    read=done.document, timings={"wall_s": done.wall_s, "read_s": float(done.result.seconds)},
                    csv=csv_links(done.run_id, PROBE_KIND))
