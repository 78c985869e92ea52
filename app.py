"""Concept Petri Dish web app: the HTTP API (``/api/*``, docs at ``/docs``) and the Gradio UI at ``/``.

    python app.py                      # the default model, http://127.0.0.1:7860
    python app.py --model PATH_OR_ID --store runs/ --device cuda

``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT`` set the address (as on Hugging Face Spaces).
"""

from __future__ import annotations

import argparse
import os
import sys

from petri.api import create_app
from petri.backends.select import BackendUnavailableError, load_backend_model
from petri.models import ModelNotFoundError
from petri.service import PetriService
from petri.store import RunStore, StoreError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Serve the Concept Petri Dish web app (UI + HTTP API).")
    parser.add_argument("--model", default=None, help="hub id (local cache only) or checkpoint folder; default: "
                        "the real DiffusionGemma when cached on a GPU machine, else the embedded assets/petri-tiny")
    parser.add_argument("--store", default="runs", help="run-store folder (SQLite); default: runs/")
    parser.add_argument("--device", default="auto", help="auto (cuda → mps → cpu), cuda, mps or cpu")
    parser.add_argument("--dtype", default="auto", help="auto, bf16, fp16 or fp32")
    parser.add_argument("--backend", default="auto",
                        help="auto (MLX on Apple silicon without a torch GPU, else torch), torch or mlx")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to bind (env GRADIO_SERVER_NAME; default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                        help="port (env GRADIO_SERVER_PORT; default 7860)")
    parser.add_argument("--busy-wait", type=float, default=0.0,
                        help="seconds an API request waits for a running job before answering 503 (default 0)")
    parser.add_argument("--tiny-random", action="store_true",
                        help="serve a tiny random model instead (a smoke test of the app; its text is noise)")
    return parser


def build_service(args) -> tuple[PetriService, str | None]:
    if args.tiny_random:
        from petri.tiny import tiny_random_model

        lm, source = tiny_random_model(canvas_length=64), None
    else:
        lm = load_backend_model(args.model, backend=args.backend, device=args.device, dtype=args.dtype)
        from petri.models import default_model_name

        source = str(args.model) if args.model is not None else default_model_name()
    return PetriService(lm, RunStore(args.store)), source


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
