"""Serving the web app: ``python app.py`` (what a Hugging Face Space runs) and ``petri serve``.

    python app.py                      # the default model, http://127.0.0.1:7860
    python app.py --model PATH_OR_ID --store runs/ --device cuda

``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT`` set the address (as on Hugging Face Spaces).
The server binds to loopback (127.0.0.1) unless told otherwise: ``--host 0.0.0.0`` (or
``GRADIO_SERVER_NAME=0.0.0.0``, which a Space sets) makes it reachable from the network, where the
API has no authentication (see RELIABILITY.md).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

from petri.engine.base import BackendUnavailableError, ModelNotFoundError
from petri.model_options import add_model_arguments, load_from_args
from petri.service import PetriService
from petri.store import RunStore, StoreError
from petri.web.app import create_app


def build_parser(prog: str = "app.py") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Serve the Concept Petri Dish web app (UI + HTTP API).")
    add_model_arguments(parser)
    parser.add_argument("--store", default="runs", help="run-store folder (SQLite); default: runs/")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to bind (env GRADIO_SERVER_NAME; default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                        help="port (env GRADIO_SERVER_PORT; default 7860)")
    parser.add_argument("--busy-wait", type=float, default=0.0,
                        help="seconds an API request waits for a running job before answering 503 (default 0)")
    parser.add_argument("--tiny-random", action="store_true",
                        help="serve a tiny random model instead (a smoke test of the app; its text is noise)")
    return parser


def build_service(args: argparse.Namespace) -> tuple[PetriService, str | None]:
    """The run store, then the model (so an unwritable store fails fast), as one service; and the
    model source to show in the Model tab."""
    # The store first: an unwritable run folder fails in a second, not after loading a 52 GB model.
    store = RunStore(args.store)
    if args.tiny_random:
        from petri.engine.tiny import tiny_random_model

        lm, source = tiny_random_model(canvas_length=64), None
    else:
        lm = load_from_args(args)
        from petri.engine.torch_model import default_model_name

        source = str(args.model) if args.model is not None else default_model_name()
    return PetriService(lm, store), source


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None, prog: str = "app.py") -> int:
    """Serve the app (``python app.py ARGS`` / ``petri serve ARGS``); 2 on a start-up error."""
    args = build_parser(prog).parse_args(argv)
    try:
        service, source = build_service(args)
    except (ModelNotFoundError, StoreError, ValueError, BackendUnavailableError) as err:
        print(f"error: {err}", file=sys.stderr)
        if isinstance(err, ModelNotFoundError):
            print("hint: `python app.py --tiny-random` serves the app on a tiny random model (its text is noise)",
                  file=sys.stderr)
        return 2
    app = create_app(service, model_source=source, busy_wait_s=args.busy_wait)
    import uvicorn

    print(f"Concept Petri Dish: {service.lm.model_id} on {service.lm.device} — http://{args.host}:{args.port}/ "
          f"(API docs at /docs)", flush=True)
    if not is_loopback(args.host):
        print(f"warning: serving on {args.host}, reachable from the network; the API has no authentication "
              "(see RELIABILITY.md)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
