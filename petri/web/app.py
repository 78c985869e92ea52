"""The whole web app: ``/api/*`` routes, OpenAPI docs at ``/docs``, the Gradio UI at ``/``."""

from __future__ import annotations

from fastapi import FastAPI

from petri.app.service import PetriService
from petri.core.config import PetriConfig
from petri.engine.torch.prompt_cache import keep_no_prompts, set_prompt_cache_bytes
from petri.web import gpu_executor
from petri.web.access import AccessPolicy, ApiTokenMiddleware
from petri.web.api.deps import JobGate
from petri.web.api.jobs import router as job_router
from petri.web.api.probe import router as probe_router
from petri.web.api.replay import router as replay_router
from petri.web.api.routes import router
from petri.web.api.runs import router as runs_router
from petri.web.errors import install_error_handlers
from petri.web.limits import MAX_UPLOAD_BYTES
from petri.web.zerogpu_routes import ZeroGpuRoutes


def create_app(
    service: PetriService,
    *,
    ui: bool = True,
    model_source: str | None = None,
    busy_wait_s: float = 0.0,
    access: AccessPolicy = AccessPolicy(),
    config: PetriConfig = PetriConfig(),
) -> FastAPI:
    """The FastAPI app over ``service`` (kept on ``app.state.service``), with the Gradio UI mounted at
    ``/`` unless ``ui`` is False.

    ``model_source`` (the folder or hub id the model came from) lets the UI show its model card;
    ``busy_wait_s`` is how long an API request waits for a running job before answering 503;
    ``access`` says who may see what (:mod:`petri.web.access`: local, public, API token);
    ``config`` is the environment's configuration (:class:`petri.core.config.PetriConfig`): its
    prompt-cache limit and ZeroGPU call duration. A public app keeps no encoded prompts and no
    captured encoder passes unless ``config.prompt_cache_mb`` (``PETRI_PROMPT_CACHE_MB``) asks for
    them (:mod:`petri.engine.torch.prompt_cache`: a reused prompt is faster, which would tell a visitor
    that someone else sent it; :mod:`petri.engine.cuda.encoder_graphs`: the same of a prompt's length).
    """
    app = FastAPI(
        title="Concept Petri Dish",
        description="Pin concept anchors on a text-diffusion canvas and measure where the model struggled.",
        version="1.0",
        docs_url=None,  # served below from local files: FastAPI's default page loads Swagger UI from a CDN
        redoc_url=None,
    )
    serve_docs_offline(app)
    app.state.service = service
    # the model a ZeroGPU call's forked child samples with, and how the child puts it on its card
    placement = gpu_executor.zerogpu_placement(service.lm, config.zerogpu_size) if gpu_executor.on_zero_gpu() else None
    gpu_executor.serve(service, duration_s=config.gpu_duration_s, placement=placement, size=config.zerogpu_size)
    if config.prompt_cache_mb is not None:
        set_prompt_cache_bytes(service.lm, config.prompt_cache_mb * 2**20)
    elif access.public:
        keep_no_prompts(service.lm)
    app.state.jobs = JobGate(service, busy_wait_s)
    app.state.access = access
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(replay_router)  # before runs_router: its {table}.{fmt} would take replay.gif (tests/runs/test_formats.py)
    app.include_router(runs_router)
    app.include_router(job_router)
    app.include_router(probe_router)
    app.add_middleware(ZeroGpuRoutes)  # on ZeroGPU the routes that run the model answer 501 (Gradio endpoints instead)
    if ui:
        import gradio as gr

        from petri.web.ui.access import CallerMiddleware
        from petri.web.ui.build import UI_CSS, build_ui

        blocks = build_ui(service, model_source=model_source, access=access)
        app = gr.mount_gradio_app(app, blocks, path="/", css=UI_CSS, max_file_size=MAX_UPLOAD_BYTES)
        if access.public:
            app.add_middleware(CallerMiddleware, policy=access)
    if access.api_token:
        app.add_middleware(ApiTokenMiddleware, token=access.api_token)
    return app


#: Where the Swagger UI's own files are served (from the ``fastapi-offline`` package).
DOCS_ASSETS = "/docs-assets"


def serve_docs_offline(app: FastAPI) -> None:
    """``/docs``: the OpenAPI page with Swagger UI's script and styles served by this app from the
    ``fastapi-offline`` package (Swagger UI 5, which reads the OpenAPI 3.1 FastAPI writes), so it
    works on a machine without internet (FastAPI's default page loads them from a CDN and is blank
    offline)."""
    from pathlib import Path

    import fastapi_offline
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    app.mount(DOCS_ASSETS, StaticFiles(directory=str(Path(fastapi_offline.__file__).parent / "static")),
              name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs():
        return get_swagger_ui_html(
            openapi_url=app.openapi_url, title=f"{app.title}: HTTP API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url="data:,",
        )
