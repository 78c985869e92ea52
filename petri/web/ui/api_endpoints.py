"""The HTTP API's GPU work as named Gradio endpoints, for Hugging Face ZeroGPU.

On ZeroGPU the FastAPI routes that run the model answer ``501`` (:mod:`petri.web.zerogpu_routes`):
a ``spaces.GPU`` call must start from a Gradio request, whose context carries the visitor's quota
token. :func:`register_api_endpoints` adds, inside the app's ``gr.Blocks``, one API-only endpoint
(``gr.api``, no component on the page) per route of
:data:`~petri.web.zerogpu_routes.GPU_ROUTES` that has one:

- ``/seed``: the JSON body of ``POST /api/seed`` (a dict; validated once, by the same pydantic model
  :class:`~petri.web.api.requests.SeedRequest` and the same checks, the synchronous budget
  included); its model work is one ``spaces.GPU`` call
  (:func:`~petri.web.gpu_executor.zerogpu_seed_stream`), stored as it lands. It streams one frame
  per denoising step, ``{"kind": "step", "run_id", "step", "argmax": [[...]], "finished": [...]}``
  (the step's raw argmax ids, samples × canvas, -1 where a sample had finished), then the route's
  own JSON answer (``kind`` ``"seed"``); on a public server that answer also carries ``token``, the
  caller token to send as ``X-Petri-Token`` (the route hands it out as a header).

- ``/study``: the JSON body of ``POST /api/study`` (validated once by
  :class:`~petri.web.api.requests.StudyRequest` and the same checks); each (event, template) batch is
  one ``spaces.GPU`` call (:class:`~petri.web.gpu_executor.ZeroGpuStudyExecutor`, under
  :func:`petri.study.execution.runner.run_study`, which stores each batch as it lands, so a call that stops
  keeps the batches before it and posting the body again resumes). It streams one frame per stored
  batch, ``{"kind": "batch", "done", "total", "event_id", "template_id", "skipped"}``, then the
  route's own answer (``kind`` ``"study"``; ``token`` on a public server).

- ``/probe``: the JSON body of ``POST /api/probe`` for a read (a labelled set is refused naming the
  field: its evaluation would be a GPU call an item), planned as the route plans it and read in one
  ``spaces.GPU`` call (:func:`~petri.web.gpu_executor.run_zerogpu_read`); its one frame is the route's
  answer (``kind`` ``"probe"``; ``token`` on a public server).

With ``gradio_client``: ``Client(space).predict(body, api_name="/seed")`` returns the answer;
``submit`` iterates the frames. A bad field raises ``gradio.Error`` naming it, as the route's 422 does;
"GPU task aborted" names the events that were stored before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
from pydantic import BaseModel, ValidationError

from petri.app.service import PetriService
from petri.core.probe import ProbeInputError
from petri.engine.probe import plan_probe
from petri.web.api.answers import check_sync_budget, probe_answer, seed_answer, study_answer
from petri.web.api.probe_requests import ProbeIn, prepare_probe
from petri.web.api.requests import SeedRequest, StudyRequest, prepare_seed, prepare_study
from petri.web.errors import FieldError, request_error_message
from petri.web.gpu_executor import GpuAborted, run_zerogpu_read, zerogpu_seed_stream, zerogpu_study_stream
from petri.web.ui.access import UiAccess
from petri.web.zerogpu_routes import GPU_ROUTES


def step_frame(run_id: str, step) -> dict:
    """A streamed frame of denoising ``step`` (a :class:`~petri.engine.base.LiveStep`, numpy arrays)."""
    return {"kind": "step", "run_id": run_id, "step": int(step.index), "argmax": step.argmax.tolist(),
            "finished": step.finished.tolist()}


def validated(body: dict, model: type[BaseModel], prepare: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``(request, plan)``: ``body`` validated once by the route's pydantic ``model`` and planned by
    ``prepare`` (the route's own checks); a refusal is a ``gradio.Error`` naming the field."""
    try:
        parsed = model.model_validate(body)
        return parsed, prepare(parsed)
    except (ValidationError, FieldError) as err:
        raise gr.Error(request_error_message(err), title="Bad request", print_exception=False) from None


def seed_plan(service: PetriService, parsed: SeedRequest):
    """A seed request planned as ``POST /api/seed`` plans it, within the synchronous budget."""
    plan = prepare_seed(parsed, service.lm)
    check_sync_budget(len(plan.events), plan.samples, plan.settings.max_denoising_steps, service.canvas_length)
    return plan


def seed_endpoint(service: PetriService, who: UiAccess):
    """The ``/seed`` endpoint's function over ``service``: a generator of frames, then the answer."""

    def seed(body: dict, request: gr.Request) -> Iterator[dict[str, Any]]:
        """A seed on the GPU: the body of POST /api/seed in, a frame per denoising step, then its answer."""
        caller = who.caller(request).for_submission()
        parsed, plan = validated(body, SeedRequest, lambda parsed: seed_plan(service, parsed))
        try:
            for kind, payload in zerogpu_seed_stream(service, plan, caller.owner):
                if kind == "progress":
                    yield step_frame(payload.run_id or "", payload)
                    continue
                answer = seed_answer(service, plan, payload, parsed.include_trajectories).model_dump(mode="json")
                yield {**answer, "token": caller.token} if caller.public else answer
        except GpuAborted as err:
            raise gr.Error(f"Stopped: {err}", title="GPU task aborted", print_exception=False) from None

    return seed


def study_endpoint(service: PetriService, who: UiAccess):
    """The ``/study`` endpoint's function over ``service``: a generator of batch frames, then the answer."""

    def study(body: dict, request: gr.Request) -> Iterator[dict[str, Any]]:
        """A study on the GPU, one call per batch: the body of POST /api/study in, a frame per batch, then its answer."""
        caller = who.caller(request).for_submission()
        _, plan = validated(body, StudyRequest, lambda parsed: prepare_study(parsed, service.lm))
        try:  # the batches driven from a thread carrying this request's context (the quota token)
            for kind, payload in zerogpu_study_stream(service, plan, owner=caller.owner):
                if kind == "progress":
                    yield {"kind": "batch", "done": payload.done, "total": payload.total, "event_id": payload.event_id,
                           "template_id": payload.template_id, "skipped": payload.skipped}
                    continue
                answer = study_answer(service, plan, payload).model_dump(mode="json")
                yield {**answer, "token": caller.token} if caller.public else answer
        except GpuAborted as err:
            raise gr.Error(f"Stopped: {err}; post the same body again to resume", title="GPU task aborted",
                           print_exception=False) from None

    return study


def read_plan(service: PetriService, parsed: ProbeIn):
    """A read's body planned on the served model as ``POST /api/probe`` plans it; a labelled set is
    refused naming ``items`` (its evaluation would be a GPU call an item: not on ZeroGPU)."""
    if parsed.is_evaluation:
        raise FieldError(["body", "items" if parsed.items is not None else "set"],
                         "a labelled set's evaluation does not run on ZeroGPU (a GPU call an item); "
                         "read one frame at a time")
    try:
        return plan_probe(service.lm, prepare_probe(parsed))
    except ProbeInputError as err:
        raise FieldError(["body", *err.field.split(".")], str(err).removeprefix(f"{err.field}: ")) from None


def probe_endpoint(service: PetriService, who: UiAccess):
    """The ``/probe`` endpoint's function over ``service``: one read, one GPU call, then its answer."""

    def probe(body: dict, request: gr.Request) -> Iterator[dict[str, Any]]:
        """A slot read on the GPU: the body of POST /api/probe (a read) in, the route's answer out."""
        caller = who.caller(request).for_submission()
        _, plan = validated(body, ProbeIn, lambda parsed: read_plan(service, parsed))
        try:
            done = run_zerogpu_read(service, plan, owner=caller.owner)
        except GpuAborted as err:
            raise gr.Error(f"Stopped: {err}", title="GPU task aborted", print_exception=False) from None
        answer = probe_answer(service, done).model_dump(mode="json")
        yield {**answer, "token": caller.token} if caller.public else answer

    return probe


#: ``api_name`` → the function that builds its endpoint (a service and the UI's access rule in).
ENDPOINTS = {"seed": seed_endpoint, "study": study_endpoint, "probe": probe_endpoint}


def register_api_endpoints(service: PetriService, who: UiAccess) -> list[str]:
    """Add the GPU routes' Gradio endpoints to the ``gr.Blocks`` being built (call inside its
    ``with``); returns their api names."""
    names = sorted({name for name in GPU_ROUTES.values() if name is not None})
    for name in names:
        gr.api(ENDPOINTS[name](service, who), api_name=name, concurrency_limit=None)
    return names
