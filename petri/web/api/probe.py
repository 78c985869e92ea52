"""``POST /api/probe``: what the model believes fills a slot between pinned text
(:mod:`petri.engine.probe`), over HTTP.

- A read (``prompt``, ``frame``, ``questions``): answered while the client waits (a client that
  leaves cancels it), stored as a ``probe`` run; ``200`` with each question's alternatives'
  probabilities per step, the slot's top-k and the run id.
- A labelled set (``items`` with ``frame`` and ``questions``, or a shipped ``set`` by name): checked,
  then queued as a ``probe-eval`` job, ``202`` with ``job_id``, ``status_url`` and ``events_url`` as
  ``POST /api/jobs/*`` answer (same queue, limits, privacy and cancel: ``DELETE /api/jobs/{id}``).

``GET /api/probe/compare?a=RUN&b=RUN``: two stored evaluations of one labelled set (two models,
prompts or settings) compared item by item, the exact McNemar test per question and the discordant
items (:func:`petri.study.probe.probe_eval.compare_predictions`, as ``petri probe --compare-to``).

Either is read back through the runs routes: ``GET /api/runs/{run_id}`` (the stored documents under
``probe``) and ``GET /api/runs/{run_id}/{table}.{fmt}`` (``reads``, ``top_k``; ``predictions``,
``summary``, ``reliability``; :mod:`petri.runs.probe_results`). Every bad field is a 422 naming it
(a :class:`~petri.core.probe.ProbeInputError` included) and stores nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

import pandas as pd
from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from petri.app.probe import ProbeRun
from petri.engine.probe import plan_probe
from petri.runs.probe_results import EVAL_KIND, predictions_table
from petri.study.probe.probe_eval import compare_predictions
from petri.web.api.answers import ProbeOut, probe_answer
from petri.web.api.deps import Client, Jobs, Service, load_run
from petri.web.api.jobs import SUBMIT_RESPONSES, _submit, _submitted
from petri.web.api.probe_requests import ProbeIn, prepare_evaluation, prepare_probe
from petri.web.api.responses import JobSubmitted
from petri.web.errors import FieldError, StrictJsonRoute
from petri.web.gpu import run_probe

router = APIRouter(prefix="/api", tags=["probe"], route_class=StrictJsonRoute)


def submit_evaluation(service, body: ProbeIn, owner: str | None):
    """Queue the labelled set of ``body`` as a ``probe-eval`` job once every item is checked against
    the served model (a refusal raises naming the field; nothing is queued)."""
    labelled, settings = prepare_evaluation(body)
    return _submit(service.submit_probe_eval, labelled, settings, owner=owner)


@router.post("/probe", response_model=ProbeOut, responses={**SUBMIT_RESPONSES, 202: {"model": JobSubmitted}})
async def probe(body: ProbeIn, service: Service, jobs: Jobs, caller: Client, client: Request, response: Response):
    """Read the slots of a frame (200), or queue a labelled set's evaluation (202, a job)."""
    caller = caller.for_submission()
    if body.is_evaluation:  # in a worker thread: checking every item against the model takes a while
        job = await run_in_threadpool(submit_evaluation, service, body, caller.owner)
        submitted = _submitted(job, caller, response)
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}  # the caller's token
        return JSONResponse(submitted.model_dump(), status_code=202, headers=headers)
    plan = await run_in_threadpool(plan_probe, service.lm, prepare_probe(body))  # tokenizes every listing order
    caller.hand_out(response)
    done: ProbeRun = await jobs.run(client, run_probe, service, plan, wait_s=jobs.busy_wait_s, owner=caller.owner)
    return probe_answer(service, done)


EvalRunId = Annotated[str, Query(description="the run id of a stored probe evaluation (kind probe-eval)", max_length=64)]


class ProbeCompareOut(BaseModel):
    """Two stored evaluations compared on the items both scored (repeat 0)."""

    a: str
    b: str
    labels: list[str] = Field(description="the two runs' labels in the summaries: their run ids' first 8 characters")
    questions: list[dict[str, Any]] = Field(description="per question: n, a_correct, b_correct, mcnemar (exact), summary")
    discordant: list[dict[str, Any]] = Field(description="the items one run answered right and the other wrong: "
                                                         "item_id, question, gold, answer_a, answer_b, correct_a, correct_b")


def stored_predictions(service, run_id: str, caller, field: str) -> pd.DataFrame:
    """The predictions of stored evaluation ``run_id`` (what it read so far, if it stopped), or 404
    (no such run for this caller) / 422 naming ``field`` (not an evaluation, nothing read)."""
    run, _ = load_run(service, run_id, caller)
    if run["kind"] != EVAL_KIND:
        raise FieldError(["query", field], f"run {run_id} is a {run['kind']} run, not a probe evaluation ({EVAL_KIND})")
    chunks = list(predictions_table(service.load_results(run_id)))
    if not chunks or all(chunk.empty for chunk in chunks):
        raise FieldError(["query", field], f"run {run_id} holds no predictions (status {run['status']})")
    return pd.concat(chunks, ignore_index=True)


@router.get("/probe/compare", response_model=ProbeCompareOut)
def compare(a: EvalRunId, b: EvalRunId, service: Service, caller: Client) -> ProbeCompareOut:
    """Two stored evaluations of one labelled set compared item by item: exact McNemar per question."""
    labels = (a[:8], b[:8])
    found = compare_predictions(stored_predictions(service, a, caller, "a"), stored_predictions(service, b, caller, "b"),
                                labels)
    return ProbeCompareOut(a=a, b=b, **found)
