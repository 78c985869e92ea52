"""What the ZeroGPU path costs over the dedicated one, off-Space: one seed of the embedded model on
this machine's CPU, sampled by ``PetriService.seed`` (the dedicated path) and by
``petri.web.gpu_executor.run_zerogpu_seed`` under the fork harness (tests/zerogpu_support.py: a
forked child per call, every frame pickled), alternately, ``--repeats`` times each. The difference
is the harness's fork, pickling and thread hand-off, not ZeroGPU's scheduling, weight transfer or
cold start (none of which runs here). Prints one JSON object (seconds; medians and every sample).

    python experiments/zerogpu_overhead.py --samples 12 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import zerogpu_support as harness  # noqa: E402
from petri.app.service import PetriService  # noqa: E402
from petri.core.dish import Dish  # noqa: E402
from petri.core.plan import SeedEvent  # noqa: E402
from petri.engine.select import default_model_name, load_backend_model  # noqa: E402
from petri.runs.store import RunStore  # noqa: E402
from petri.web import gpu_executor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    lm = load_backend_model(default_model_name(), device="cpu")
    service = PetriService(lm, RunStore(Path(tempfile.mkdtemp()) / "store"))
    spaces = types.ModuleType("spaces")
    spaces.GPU = harness.GPU
    sys.modules["spaces"] = spaces
    gpu_executor.serve(service)
    gpu_executor.zerogpu_seed = gpu_executor.spaces_gpu(duration=600)(gpu_executor.seed_frames)
    event = SeedEvent(Dish(["order", "inventory", "person"], "Only 90 units are in stock, but the customer ordered 120."))
    times: dict[str, list[float]] = {"dedicated": [], "zerogpu_harness": []}
    frames = []
    for _ in range(args.repeats):
        for name in times:
            plan = service.plan([event], args.samples, seed=0)
            started = time.perf_counter()
            if name == "dedicated":
                service.seed(plan)
            else:
                gpu_executor.run_zerogpu_seed(service, plan)
                frames.append(harness.CALLS[-1].yields)
            times[name].append(time.perf_counter() - started)
    service.shutdown()
    print(json.dumps({
        "model": lm.model_id, "device": "cpu", "samples": args.samples, "frames_per_call": frames[-1],
        "median_s": {name: round(statistics.median(ts), 3) for name, ts in times.items()},
        "samples_s": {name: [round(t, 3) for t in ts] for name, ts in times.items()},
    }, indent=1))


if __name__ == "__main__":
    main()
