"""Serving the web app: ``python app.py`` (what a Hugging Face Space runs) and ``petri serve``.

    python app.py                      # the default model, http://127.0.0.1:7860
    python app.py --model PATH_OR_ID --store runs/ --device cuda

``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT`` set the address (as on Hugging Face Spaces). The
environment is read once, here (:class:`petri.core.config.PetriConfig`: every variable in
docs/configuration.md), and passed down.
The server binds to loopback (127.0.0.1) unless told otherwise: ``--host 0.0.0.0`` (or
``GRADIO_SERVER_NAME=0.0.0.0``, which a Space sets) makes it reachable from the network; it is then
public (:mod:`petri.web.access`: jobs and runs private to their submitters; ``PETRI_API_TOKEN``
requires a token on every route). SIGINT/SIGTERM stop the running work at its next step (marked
``interrupted``, resumable) and the process exits within seconds; at start, what a crash left
running is marked ``interrupted``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Mapping

from petri.app.model_options import add_model_arguments, load_from_args
from petri.app.service import PetriService
from petri.core.config import ConfigError, PetriConfig, variable
from petri.core.paths import use_assets_dir, use_shipped_study_dir
from petri.engine.base import BackendUnavailableError, ModelNotFoundError, SamplingModel
from petri.runs.store import RunStore, StoreError
from petri.web import gpu_executor, limits
from petri.web.access import CALLER_HEADER, AccessPolicy, RedactSecrets
from petri.web.app import create_app
from petri.web.zerogpu_space import prepare_spaces, run_spaces_startup

#: Seconds a stopping server gives open requests and the job worker before it exits anyway.
SHUTDOWN_GRACE_S = 5


def build_parser(prog: str = "app.py", config: PetriConfig = PetriConfig()) -> argparse.ArgumentParser:
    """The server's options, their defaults from ``config`` (the environment, read by :func:`main`)."""
    parser = argparse.ArgumentParser(prog=prog, description="Serve the Concept Petri Dish web app (UI + HTTP API).")
    add_model_arguments(parser, config)
    parser.add_argument("--store", default="runs", help="run-store folder (SQLite); default: runs/")
    parser.add_argument("--host", default=config.host,
                        help=f"address to bind (env {variable('host')}; default {PetriConfig().host})")
    parser.add_argument("--port", type=int, default=config.port,
                        help=f"port (env {variable('port')}; default {PetriConfig().port})")
    parser.add_argument("--busy-wait", type=float, default=0.0,
                        help="seconds an API request waits for a running job before answering 503 (default 0)")
    parser.add_argument("--max-queued-jobs", type=int, default=limits.MAX_QUEUED_JOBS,
                        help=f"jobs that may wait in the job queue (POST /api/jobs/*); default {limits.MAX_QUEUED_JOBS}")
    parser.add_argument("--tiny-random", action="store_true",
                        help="serve a tiny random model instead (a smoke test of the app; its text is noise)")
    return parser


def build_service(args: argparse.Namespace) -> tuple[PetriService, str | None]:
    """The run store, then the model (so an unwritable store fails fast), as one service; and the
    model source to show in the Model tab."""
    # The store first: an unwritable run folder fails in a second, not after loading a 52 GB model.
    store = RunStore(args.store)
    runs, jobs = store.mark_unfinished_interrupted()
    if runs or jobs:
        print(f"note: {runs} runs and {jobs} jobs that a stopped process left unfinished are marked interrupted "
              "(a study resumes when it is run again)", file=sys.stderr, flush=True)
    lm: SamplingModel
    if args.tiny_random:
        from petri.engine.torch.tiny import tiny_random_model

        lm, source = tiny_random_model(canvas_length=64), None
    else:
        lm = load_from_args(gpu_executor.host_model_args(args))  # on ZeroGPU: the CPU; each GPU call places it
        from petri.engine.select import default_model_name

        source = str(args.model) if args.model is not None else default_model_name()
    return PetriService(lm, store, max_queued_jobs=args.max_queued_jobs), source


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def access_policy(host: str, config: PetriConfig = PetriConfig()) -> AccessPolicy:
    """Public (jobs and runs private to their submitters) when bound beyond loopback or when
    ``config.public`` (``PETRI_PUBLIC=1``); an API token on every route when ``config.api_token``
    (``PETRI_API_TOKEN``) is set."""
    token = config.api_token.get_secret_value() if config.api_token is not None else None
    return AccessPolicy(public=not is_loopback(host) or config.public, api_token=token)


def server_config(app, host: str, port: int):
    """uvicorn's config for the app, with ``api_token`` values scrubbed from its access log."""
    import logging

    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    access_log = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactSecrets) for f in access_log.filters):
        access_log.addFilter(RedactSecrets())
    return config


def serve(app, service: PetriService, host: str, port: int) -> None:
    """uvicorn until SIGINT/SIGTERM. On the signal the service's work stops first (the running job
    and synchronous requests at their next step, queued jobs at once: all ``interrupted``), so open
    requests end and the process exits within seconds; then the job worker is joined."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            service.begin_shutdown()
            super().handle_exit(sig, frame)

    Server(server_config(app, host, port)).run()
    service.shutdown(timeout=SHUTDOWN_GRACE_S)
    service.close_store()


def main(argv: list[str] | None = None, prog: str = "app.py", config: PetriConfig | None = None,
         environ: Mapping[str, str] | None = None) -> int:
    """Serve the app (``python app.py ARGS`` / ``petri serve ARGS``); 2 on a start-up error. The
    configuration is ``config`` (``petri serve``: the command read it), else read once from ``environ``
    (default ``os.environ``)."""
    try:
        config = config or PetriConfig.from_env(os.environ if environ is None else environ)
        parser = build_parser(prog, config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    use_assets_dir(config.assets)
    use_shipped_study_dir(config.shipped_study)
    args = parser.parse_args(argv)
    prepare_spaces()  # on ZeroGPU, spaces' torch patch before the model loads (petri.web.zerogpu_space)
    try:
        service, source = build_service(args)
    except (ModelNotFoundError, StoreError, ValueError, BackendUnavailableError) as err:
        print(f"error: {err}", file=sys.stderr)
        if isinstance(err, ModelNotFoundError):
            print("hint: `python app.py --tiny-random` serves the app on a tiny random model (its text is noise)",
                  file=sys.stderr)
        return 2
    access = access_policy(args.host, config)
    app = create_app(service, model_source=source, busy_wait_s=args.busy_wait, access=access, config=config)
    print(f"Concept Petri Dish: {service.model_id} on {service.model_info()['device']} — http://{args.host}:{args.port}/ "
          f"(API docs at /docs)", flush=True)
    if not is_loopback(args.host):
        guard = ("every route but /api/health needs the API token" if access.api_token else
                 f"set {variable('api_token')} to require a token on every route")
        print(f"warning: serving on {args.host}, reachable from the network; jobs and runs are private to "
              f"whoever submitted them ({CALLER_HEADER}); {guard} (see RELIABILITY.md)", file=sys.stderr, flush=True)
    run_spaces_startup()  # on ZeroGPU: what spaces runs at gr.Blocks.launch(), which this server never calls
    serve(app, service, args.host, args.port)
    return 0
