"""What one live redraw of the Study tab costs as a study grows: run a study file (the shipped one
by default, its first template) on the embedded model, and after every ``--every`` stored batches
time the Study tab's live views (:meth:`petri.web.ui.study_tab.study.StudyController.live_views`) two ways:
reading every stored batch again (what the tab did before it followed the run with a reader) and
with one :class:`~petri.study.results.provisional.BatchReader` that decodes each batch once. Prints JSON.

    python experiments/study_redraw_cost.py --samples 2 --steps 8 --every 9
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    from petri.app.service import PetriService
    from petri.core.watch import Watch
    from petri.engine.torch.model import EMBEDDED_MODEL_PATH, load_model
    from petri.runs.store import RunStore
    from petri.study.execution.runner import run_study
    from petri.study.plan import StudyPlan
    from petri.study.results.provisional import BatchReader
    from petri.study.schema import load_study
    from petri.web.ui.study_tab.study import StudyController

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=REPO / "assets/studies/inventory_order.json")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--every", type=int, default=9)
    args = parser.parse_args()
    study = load_study(args.study)
    template = (study.templates[0].id,)
    lm = load_model(EMBEDDED_MODEL_PATH, device="cpu")
    settings = replace(lm.default_settings(), max_denoising_steps=args.steps)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        service = PetriService(lm, RunStore(Path(tmp)))
        ctl = StudyController(service)
        follow: list[BatchReader] = []

        def on_run_id(run_id: str) -> None:
            follow.append(BatchReader(service.store, run_id, study, template, 0))
            follow.append(run_id)

        def progress(p) -> None:
            if p.done % args.every or p.done == 0:
                return
            reader, run_id = follow
            total = p.total
            start = time.perf_counter()
            ctl.live_views(study, run_id, template, settings, 0, total)  # a fresh reader: every batch read
            full = time.perf_counter() - start
            start = time.perf_counter()
            ctl.live_views(study, run_id, template, settings, 0, total, reader)  # the run's reader: new ones only
            followed = time.perf_counter() - start
            rows.append({"batches": p.done, "read_all_s": round(full, 3), "reader_s": round(followed, 3)})

        result = run_study(lm, StudyPlan(study, args.samples, 0, settings, tuple(template)), service.store,
                           watch=Watch(progress=progress), on_run_id=on_run_id)
    print(json.dumps({"study": args.study.name, "batches": len(result.batches), "samples": args.samples,
                      "steps": args.steps, "mean_batch_s": round(result.timings["mean_batch_s"], 3), "redraws": rows}))


if __name__ == "__main__":
    main()
