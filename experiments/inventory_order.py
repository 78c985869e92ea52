"""Reproduce the inventory / order / person study end to end: one command, resumable.

    python experiments/inventory_order.py                 # embedded model, English study, 12 samples
    python experiments/inventory_order.py --lang ko --model google/diffusiongemma-26B-A4B-it

It runs the shipped study file (``assets/studies/inventory_order.json``, or ``_ko.json`` with
``--lang ko``) through exactly the code of ``python -m petri study`` and writes ``report.md``, the
tidy CSVs, ``run.json`` and ``figures/`` into ``experiments/results/inventory_order-<lang>-<model>``
(unless ``--out`` is given; the shipped run, English on petri-tiny, into
``assets/studies/results/inventory_order-en-petri-tiny``, where the Study tab and an installed wheel find it). Killed midway, the same
command resumes from the run store (``runs/store`` unless ``--store`` is given). Every other option of ``python -m petri study``
(``--samples``, ``--seed``, ``--steps``, ``--templates``, ``--device``, ...) passes through.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from petri.cli.main import main  # noqa: E402
from petri.core.paths import SHIPPED_RUN, shipped_run_dir  # noqa: E402

STUDIES = {"en": REPO / "assets" / "studies" / "inventory_order.json", "ko": REPO / "assets" / "studies" / "inventory_order_ko.json"}


def _short(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (reports stay portable)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Every option of `python -m petri study` passes through (see `python -m petri study --help`).",
    )
    parser.add_argument("--lang", choices=sorted(STUDIES), default="en", help="which shipped study file to run")
    known, rest = parser.parse_known_args(argv)
    args = ["study", _short(STUDIES[known.lang]), *rest]
    if "--out" not in rest:
        model = rest[rest.index("--model") + 1] if "--model" in rest and rest.index("--model") + 1 < len(rest) else None
        if model is None:
            from petri.engine.torch.model import default_model_name

            model = default_model_name()
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(model).name or model)
        folder = f"inventory_order-{known.lang}-{name}"
        # the run the Study tab opens with lives with the study files, where an installed wheel finds it
        out = shipped_run_dir() if folder == SHIPPED_RUN else REPO / "experiments" / "results" / folder
        args += ["--out", _short(out)]
    if "--store" not in rest:
        args += ["--store", _short(REPO / "runs" / "store")]
    return main(args)


if __name__ == "__main__":
    sys.exit(run())
