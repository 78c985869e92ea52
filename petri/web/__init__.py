"""Layer 5: the HTTP API and the Gradio UI.

The web edge over :class:`~petri.app.service.PetriService`: the HTTP API and the Gradio UI.

Inside it (each module imports only those above it; the routers and the UI never import each other)::

    limits, errors, access, tokens   request limits, JSON error bodies, who may see what, token colours
    gpu                              the model calls (ZeroGPU-wrapped) both the routes and the UI make
    replay_files                     the files a stored run's replay is exported as
    api/                             request and response models, then the routers (/api, /api/jobs, replay)
    ui/                              the Gradio tabs; ui.build.build_ui assembles them
    app, server                      create_app (middleware, handlers, routers, the mounted UI); serving it
"""
