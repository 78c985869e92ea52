"""The web layer over :class:`~petri.service.PetriService`: the HTTP API and the Gradio UI.

Layers (each module imports only those above it; the routes and the UI never import each other)::

    limits      request limits (numbers and the text /api/health shows)
    errors      FieldError, JSON error bodies, the body-size middleware, exception handlers
    requests    request models and every model-aware check (seed, study, prompt length, layout preview)
    responses   response models and the summaries of a run
    gpu         the model calls (ZeroGPU-wrapped) both the routes and the UI make
    routes      the /api routes (APIRouter; the service from app.state)
    ui_views    the UI's pure helpers and figures; ui_dish, ui_study, ui_model: the tabs; ui: build_ui
    app         create_app: FastAPI app, middleware, handlers, router, the mounted UI
"""
