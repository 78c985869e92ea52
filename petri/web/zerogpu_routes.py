"""The FastAPI routes that run the model answer ``501`` on Hugging Face ZeroGPU, naming the Gradio
endpoint to use instead.

On ZeroGPU a ``spaces.GPU`` call is scheduled against the visitor's quota, whose token travels in
Gradio's request context (``spaces`` reads ``gradio.context.LocalContext.request`` in the thread
that makes the call). A FastAPI route runs its work in a worker thread outside any Gradio request,
so the call would carry no token (the Space's own quota, then "No GPU was available"), and the job
routes would run the model in the main process, which must never touch CUDA there. So, while
``SPACES_ZERO_GPU`` is set (:func:`~petri.web.gpu_executor.on_zero_gpu`, read per request), every
route of :data:`GPU_ROUTES` answers ``501 Not Implemented`` before its body is read, with a JSON body
that names the Gradio endpoint doing the same work (:data:`GPU_ROUTES`' value; ``None``: none yet) and
a ``gradio_client`` snippet calling it. Everything else (health, run listing, stored runs, exports,
jobs' status) stays on FastAPI: it is CPU work.

Off ZeroGPU nothing changes: the middleware passes every request through.
"""

from __future__ import annotations

import json
import os

from petri.web.gpu_executor import on_zero_gpu

#: ``POST`` path → the ``api_name`` of the Gradio endpoint that does its work on ZeroGPU
#: (:mod:`petri.web.ui.api_endpoints`), or None where there is none yet.
GPU_ROUTES: dict[str, str | None] = {
    "/api/seed": "seed",
    "/api/jobs/seed": "seed",
    "/api/study": "study",
    "/api/jobs/study": "study",
    "/api/probe": "probe",
}
#: What :func:`zerogpu_answer` puts in the snippet when the Space's id is not known (``SPACE_ID`` unset).
SPACE_PLACEHOLDER = "OWNER/SPACE"


def client_snippet(api_name: str, space: str) -> str:
    """Python that calls Gradio endpoint ``api_name`` of Space ``space`` with ``gradio_client`` and
    the route's own JSON body (a dict), streaming its frames and then the answer."""
    return (
        "from gradio_client import Client\n"
        f"client = Client({space!r})  # hf_token=... counts the call against your own ZeroGPU quota\n"
        "body = {...}  # the same JSON body as the FastAPI route\n"
        f"answer = client.predict(body, api_name={'/' + api_name!r})  # the route's JSON answer\n"
        f"# or, frame by frame: for frame in client.submit(body, api_name={'/' + api_name!r}): ...\n"
    )


def zerogpu_answer(path: str) -> dict:
    """The ``501`` body for ``POST path`` (a key of :data:`GPU_ROUTES`) on ZeroGPU."""
    api_name = GPU_ROUTES[path]
    why = (f"POST {path} does not run on this ZeroGPU Space: GPU work has to start from a Gradio request, "
           "which carries the visitor's ZeroGPU quota")
    if api_name is None:
        return {"detail": f"{why}; this work has no Gradio endpoint yet", "zerogpu": True,
                "gradio_endpoint": None, "gradio_client": None}
    space = os.environ.get("SPACE_ID") or SPACE_PLACEHOLDER
    return {"detail": f"{why}; call the Gradio endpoint /{api_name} with the same JSON body",
            "zerogpu": True, "gradio_endpoint": f"/{api_name}", "gradio_client": client_snippet(api_name, space)}


class ZeroGpuRoutes:
    """ASGI middleware: on ZeroGPU, ``POST`` to a route of :data:`GPU_ROUTES` answers ``501`` with
    :func:`zerogpu_answer` (the body is not read); any other request, and every request off ZeroGPU,
    goes to the app."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "").rstrip("/") if scope["type"] == "http" else ""
        if path not in GPU_ROUTES or scope.get("method") != "POST" or not on_zero_gpu():
            await self.app(scope, receive, send)
            return
        body = json.dumps(zerogpu_answer(path)).encode()
        await send({"type": "http.response.start", "status": 501,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
