"""How heavy the trajectory viewer is on the real model's canvas: a synthetic stored trajectory of
``--samples`` × ``--steps`` × ``--canvas`` (default 64 × 48 × 256, DiffusionGemma's shape; random
argmax over a 262,144-token vocabulary, decoded as ``t<id>``), timed ``--repeats`` times each:

- record: :func:`petri.measure.replay.sample_record` of one sample (what the view is sent on a sample change)
  and the size of its JSON;
- figure: :func:`petri.study.figures.trajectory_plots.trajectory_figure` of one sample;
- gif: :func:`petri.study.figures.animation.write_gif` of one sample (one frame per step);
- table: :func:`petri.measure.replay.steps_table` of every sample (the ``steps.csv`` / ``.parquet`` rows).

Prints one JSON object (medians in seconds, bytes, rows).

    python experiments/trajectory_view.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from petri.core.trajectory import AnchorSpan, SamplerSettings, Trajectory  # noqa: E402
from petri.measure.replay import sample_record, steps_table  # noqa: E402
from petri.study.figures.animation import write_gif  # noqa: E402
from petri.study.figures.trajectory_plots import trajectory_figure  # noqa: E402


def synthetic(samples: int, steps: int, canvas: int, seed: int = 0) -> Trajectory:
    rng = np.random.default_rng(seed)
    argmax = rng.integers(0, 262_144, size=(samples, steps, canvas), dtype=np.int32)
    anchors = [[AnchorSpan("order", 10, (1, 2)), AnchorSpan("inventory", 100, (3,))] for _ in range(samples)]
    mask = np.zeros((samples, canvas), dtype=bool)
    mask[:, [10, 11, 100]] = True
    return Trajectory(
        argmax=argmax, entropy=rng.exponential(1.0, size=argmax.shape).astype(np.float32),
        accepted=rng.random(argmax.shape) < 0.5, steps=np.full(samples, steps, dtype=np.int32), anchor_mask=mask,
        final_ids=argmax[:, -1].astype(np.int64), anchors=anchors, final_texts=[""] * samples, prompt="p",
        prompt_ids=np.array([1]), settings=SamplerSettings(max_denoising_steps=steps), model_id="synthetic",
    )


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--canvas", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    traj = synthetic(args.samples, args.steps, args.canvas)
    decode = lambda i: f"t{i}"  # noqa: E731
    record = sample_record(traj, 0, decode)
    with tempfile.TemporaryDirectory() as folder:
        out = {
            "shape": [args.samples, args.steps, args.canvas],
            "record_s": timed(lambda: sample_record(traj, 0, decode), args.repeats),
            "record_json_bytes": len(json.dumps(record)),
            "figure_s": timed(lambda: trajectory_figure(traj, 0, decode), args.repeats),
            "gif_s": timed(lambda: write_gif(traj, 0, decode, Path(folder) / "x.gif"), args.repeats),
            "gif_bytes": (Path(folder) / "x.gif").stat().st_size,
            "table_s": timed(lambda: steps_table(traj, decode), args.repeats),
            "table_rows": len(steps_table(traj, decode)),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
