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

With ``gradio_client``: ``Client(space).predict(body, api_name="/seed")`` returns the answer;
``submit`` iterates the frames. A bad field raises ``gradio.Error`` naming it, as the route's 422 does;
"GPU task aborted" names the events that were stored before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr
from pydantic import ValidationError

from petri.app.service import PetriService
from petri.web.api.requests import SeedRequest, prepare_seed
from petri.web.api.routes import check_sync_budget, seed_answer
from petri.web.errors import FieldError, request_error_message
from petri.web.gpu_executor import GpuAborted, zerogpu_seed_stream
from petri.web.ui.access import UiAccess
from petri.web.zerogpu_routes import GPU_ROUTES


def step_frame(run_id: str, step) -> dict:
    """A streamed frame of denoising ``step`` (a :class:`~petri.engine.base.LiveStep`, numpy arrays)."""
    return {"kind": "step", "run_id": run_id, "step": int(step.index), "argmax": step.argmax.tolist(),
            "finished": step.finished.tolist()}


def seed_endpoint(service: PetriService, who: UiAccess):
    """The ``/seed`` endpoint's function over ``service``: a generator of frames, then the answer."""

    def seed(body: dict, request: gr.Request) -> Iterator[dict[str, Any]]:
        """A seed on the GPU: the body of POST /api/seed in, a frame per denoising step, then its answer."""
        caller = who.caller(request).for_submission()
        try:
            parsed = SeedRequest.model_validate(body)
            plan = prepare_seed(parsed, service.lm)
            check_sync_budget(len(plan.events), plan.samples, plan.settings.max_denoising_steps, service.canvas_length)
        except (ValidationError, FieldError) as err:
            raise gr.Error(request_error_message(err), title="Bad request", print_exception=False) from None
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


#: ``api_name`` → the function that builds its endpoint (a service and the UI's access rule in).
ENDPOINTS = {"seed": seed_endpoint}


def register_api_endpoints(service: PetriService, who: UiAccess) -> list[str]:
    """Add the GPU routes' Gradio endpoints to the ``gr.Blocks`` being built (call inside its
    ``with``); returns their api names."""
    names = sorted({name for name in GPU_ROUTES.values() if name is not None})
    for name in names:
        gr.api(ENDPOINTS[name](service, who), api_name=name, concurrency_limit=None)
    return names
