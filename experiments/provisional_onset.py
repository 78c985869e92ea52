"""When a study's first provisional group comparison appears: run a study file (the shipped
``assets/studies/inventory_order.json`` by default) on a model and, after every stored batch,
compute the provisional statistics of the batches stored so far (as the Study tab does); print the
batch after which the event-level test of the compared groups first exists, out of how many.

    python experiments/provisional_onset.py --samples 2 --steps 4
    python experiments/provisional_onset.py --plan-only      # the run order alone, no sampling
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from petri.study.schema import load_study  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=REPO / "assets/studies/inventory_order.json")
    parser.add_argument("--template", default=None, help="template id (default: the first, as the Study tab)")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plan-only", action="store_true", help="count events per group in the run order; no model")
    args = parser.parse_args()
    study = load_study(args.study)
    template = args.template or study.templates[0].id
    a, b = study.comparison
    if args.plan_only:
        from petri.study.execution.runner import BatchJob, batch_key, batch_order

        jobs = [BatchJob(i, batch_key(e.id, template), e.id, template, e.group, None, args.samples, None, 0)
                for i, e in enumerate(study.events)]
        seen: dict[str, set[str]] = {a: set(), b: set()}
        for n, job in enumerate(batch_order(jobs, study, args.seed), start=1):  # noqa: B007 - n is read after the loop
            if job.group in seen:
                seen[job.group].add(job.event_id)
            if min(len(seen[a]), len(seen[b])) >= 2:
                break
        print(json.dumps({"study": args.study.name, "template": template, "seed": args.seed, "batches": len(jobs),
                          "first_comparison_after_batch": n, "share": round(n / len(jobs), 3), "sampled": False}))
        return

    from petri.core.watch import Watch
    from petri.engine.torch.model import EMBEDDED_MODEL_PATH, load_model
    from petri.runs.store import RunStore
    from petri.study.execution.runner import run_study
    from petri.study.plan import StudyPlan
    from petri.study.results.provisional import BatchReader, provisional_statistics

    lm = load_model(EMBEDDED_MODEL_PATH, device="cpu")
    settings = replace(lm.default_settings(), max_denoising_steps=args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp))
        onset: list[int] = []
        reader: list[BatchReader] = []

        def follow(run_id: str) -> None:
            reader.append(BatchReader(store, run_id, study, (template,), args.seed))

        def progress(p) -> None:
            if onset:
                return
            prov = provisional_statistics(study, reader[0].read(), p.total, args.steps, seed=args.seed, n_bootstrap=200)
            if prov.comparison is not None:
                onset.append(p.done)
                print(f"batch {p.done} of {p.total}: {prov.comparison.event.summary()}", file=sys.stderr)

        result = run_study(lm, StudyPlan(study, args.samples, args.seed, settings, (template,)), store,
                           watch=Watch(progress=progress), on_run_id=follow)
    total = len(result.batches)
    print(json.dumps({"study": args.study.name, "template": template, "seed": args.seed, "batches": total,
                      "samples": args.samples, "steps": args.steps, "first_comparison_after_batch": onset[0],
                      "share": round(onset[0] / total, 3), "sampled": True}))


if __name__ == "__main__":
    main()
