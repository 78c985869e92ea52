"""The ZeroGPU path on a real GPU, under the fork harness: cold start and per-call time (issue 63).

The main process loads the model on the CPU and never initialises CUDA (the harness,
``tests/zerogpu_support.py``, fails the run if it does); each call is a fresh forked child that puts
the model on the card (:class:`petri.engine.torch.card_placement.CardPlacement`) and samples. Two
models:

- ``embedded``: ``petri-small`` through the product's own seed path
  (:func:`petri.web.gpu_executor.run_zerogpu_seed`: plan, GPU call, each event stored), at 1 and 12
  samples; then the same plan sampled by a separate process that loads the model straight onto the
  GPU (the dedicated path), and the two runs' per-step records compared;
- ``full``: the full-size DiffusionGemma architecture (25.25 B parameters, random bf16 weights, no
  tokenizer), built in host memory (on the meta device, then filled from a repeated random tile: a
  random initialisation of 25 B values on the CPU took over 560 s), sampled through the same GPU
  call machinery (:func:`petri.web.gpu_executor._frames`) from token ids, as ``experiments/bench.py``
  does, in bf16 and, if asked, FP8.

For each call: the seconds to place the model (weights copied to the card, the tier built; timed
in the child), to the first step frame (fork + placement + prompt encoding + the first step), and
in all, with the step frames' arrival times. ``--out`` gets ``zerogpu_device.json``.

    python experiments/zerogpu_device.py --out /tmp/zg --models embedded,full --calls 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for extra in (REPO, REPO / "tests", REPO / "experiments"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import gradio  # noqa: F401  # the harness raises gradio.Error as spaces does
except ImportError:  # the GPU machines have no Gradio: a stand-in with its Error
    import types

    class _Error(Exception):
        def __init__(self, message: str = "", title: str = "", **_: object):
            super().__init__(message)
            self.message, self.title = message, title

    sys.modules["gradio"] = types.SimpleNamespace(Error=_Error)  # type: ignore[assignment]

import zerogpu_support as harness  # noqa: E402
from petri.engine.torch import card_placement  # noqa: E402
from petri.web import gpu_executor  # noqa: E402

PLACE_LOG = Path(tempfile.gettempdir()) / "zerogpu_place.jsonl"


def timed_place(original):
    """``place_on_card`` that appends its seconds (CUDA synchronised) to :data:`PLACE_LOG`: the child's
    own account of its cold start."""

    def place(lm, device="cuda", precision="bf16"):
        started = time.perf_counter()
        placed = original(lm, device, precision)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        with PLACE_LOG.open("a") as log:
            log.write(json.dumps({"precision": precision, "place_s": time.perf_counter() - started,
                                  "gpu": torch.cuda.get_device_name() if torch.cuda.is_initialized() else None,
                                  "allocated_gib": (torch.cuda.memory_allocated() / 2**30
                                                    if torch.cuda.is_initialized() else None)}) + "\n")
        return placed

    return place


def gpu_name() -> str:
    """The card's name from nvidia-smi (asking torch would initialise CUDA in this process)."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def one_call(stream) -> dict:
    """Drain ``stream`` (GPU frames) timing it: seconds to the first step frame, in all, between steps."""
    PLACE_LOG.unlink(missing_ok=True)
    started = time.perf_counter()
    arrivals = []
    for _ in stream:
        arrivals.append(time.perf_counter() - started)
    place = [json.loads(line) for line in PLACE_LOG.read_text().splitlines()] if PLACE_LOG.exists() else []
    gaps = np.diff(arrivals[:-1]) if len(arrivals) > 2 else np.array([])
    return {"first_frame_s": arrivals[0] if arrivals else None, "total_s": time.perf_counter() - started,
            "frames": len(arrivals), "median_step_s": float(np.median(gaps)) if gaps.size else None,
            "place": place, "parent_cuda_initialised": harness.parent_cuda_initialised()}


def embedded_runs(calls: int, steps: int, work: Path, device: str) -> dict:
    """petri-small through the product's ZeroGPU seed path; then the dedicated path in another process."""
    from petri.app.service import PetriService
    from petri.core.dish import Dish
    from petri.core.plan import SeedEvent
    from petri.core.trajectory import SamplerSettings
    from petri.engine.torch.model import EMBEDDED_MODEL_PATH, load_model
    from petri.runs.store import RunStore

    lm = load_model(str(EMBEDDED_MODEL_PATH), device="cpu", dtype="bfloat16")
    service = PetriService(lm, RunStore(work / "store"))
    gpu_executor.serve(service, card_placement.CardPlacement(device, "bf16"))
    gpu_executor.zerogpu_seed = harness.GPU(duration=600)(gpu_executor.seed_frames)
    event = SeedEvent(Dish(["order", "inventory", "person"],
                           "Only 90 units are in stock, but the customer ordered 120.", "{event}"))
    settings = SamplerSettings(max_denoising_steps=steps, stability_threshold=None, confidence_threshold=None)
    out: dict = {"model": lm.model_id, "calls": {}}
    plans = {}
    for samples in (1, 12):
        plan = service.plan([event], samples, settings, 7)
        plans[samples] = plan
        rows = []
        for _ in range(calls):
            stream = gpu_executor.zerogpu_seed_stream(service, plan)
            rows.append(one_call(payload for kind, payload in stream))
        out["calls"][f"{samples}x"] = rows
    out["dedicated_match"] = compare_with_dedicated(service, plans[12], work, device)
    service.shutdown()
    return out


DEDICATED = r"""
import pickle, sys
import numpy as np
from petri.engine.torch.model import EMBEDDED_MODEL_PATH
from petri.engine.seeding import sample_planned
from petri.engine.torch.model import load_model
plan = pickle.load(open(sys.argv[1], "rb"))
lm = load_model(str(EMBEDDED_MODEL_PATH), device=sys.argv[3], dtype="bfloat16")
t = sample_planned(lm, plan, 0)
np.savez(sys.argv[2], argmax=t.argmax, entropy=t.entropy, accepted=t.accepted, final_ids=t.final_ids)
"""


def compare_with_dedicated(service, plan, work: Path, device: str) -> dict:
    """The same plan sampled on the dedicated path (a process that loads straight onto the GPU) against
    the ZeroGPU path's stored event: which per-step records are equal."""
    import pickle
    from dataclasses import replace
    result = gpu_executor.run_zerogpu_seed(service, replace(plan, run_id=None))
    (_, _, zero), = service.store.load_events(result.run_id)
    (work / "plan.pkl").write_bytes(pickle.dumps(plan))
    subprocess.run([sys.executable, "-c", DEDICATED, str(work / "plan.pkl"), str(work / "dedicated.npz"), device], check=True,
                   cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    dedicated = np.load(work / "dedicated.npz")
    return {name: bool(np.array_equal(dedicated[name], getattr(zero, name)))
            for name in ("argmax", "entropy", "accepted", "final_ids")} | {
        "argmax_share_equal": float(np.mean(dedicated["argmax"] == zero.argmax))}


def fast_fill_build():
    """The full-size architecture in host memory, bf16, filled from a repeated random tile (timing only)."""
    from bench import full_size_config  # type: ignore[import-not-found]
    from transformers import DiffusionGemmaForBlockDiffusion

    from petri.engine.torch.meta_build import materialise, restore_buffers

    tile = (torch.randn(1 << 26, generator=torch.Generator().manual_seed(0))).to(torch.bfloat16)

    def fill(tensor, scale=1.0, shift=0.0):
        flat = tensor.view(-1)
        for start in range(0, flat.numel(), tile.numel()):
            chunk = flat[start:start + tile.numel()]
            chunk.copy_(tile[:chunk.numel()])
        if scale != 1.0 or shift != 0.0:
            flat.mul_(scale).add_(shift)
        return tensor

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = DiffusionGemmaForBlockDiffusion(full_size_config())
    finally:
        torch.set_default_dtype(previous)
    materialise(model, torch.device("cpu"))
    normal, uniform = torch.Tensor.normal_, torch.Tensor.uniform_
    torch.Tensor.normal_ = lambda self, mean=0.0, std=1.0, **kw: fill(self, std, mean)  # type: ignore[method-assign]
    torch.Tensor.uniform_ = lambda self, a=0.0, b=1.0, **kw: fill(self, (b - a) / 4, (a + b) / 2)  # type: ignore[method-assign]
    try:
        with torch.no_grad():
            model.init_weights()
            restore_buffers(model)
    finally:
        torch.Tensor.normal_, torch.Tensor.uniform_ = normal, uniform  # type: ignore[method-assign]
    return model.eval()


def full_frames(batch: int, prompt: int, steps: int):
    """One GPU call on the served full-size model: a ``batch``-sample, ``prompt``-token request of
    ``steps`` steps with three anchors, as GPU frames."""
    from bench import three_anchor_layouts  # type: ignore[import-not-found]

    from petri.core.trajectory import SamplerSettings
    from petri.engine.base import SampleRequest

    lm = gpu_executor._served_model()
    settings = SamplerSettings(max_denoising_steps=steps, stability_threshold=None, confidence_threshold=None)
    prompt_ids = [int(x) for x in np.random.default_rng(0).integers(1000, 200_000, size=prompt)]
    request = SampleRequest(prompt_ids, three_anchor_layouts(batch, lm.canvas_length, lm.vocab_size), settings, seed=0)
    yield from gpu_executor._frames(0, lambda on_step, cancel: lm.sample(request, on_step=on_step, cancel=cancel))


def full_runs(calls: int, steps: int, precisions: list[str], shapes: list[tuple[int, int]], work: Path,
              save) -> dict:
    from petri.app.service import PetriService
    from petri.engine.torch.model import LoadedModel
    from petri.runs.store import RunStore

    started = time.perf_counter()
    model = fast_fill_build()
    build_s = time.perf_counter() - started
    lm = LoadedModel(model=model, tokenizer=None, model_id="diffusiongemma-26B-A4B-architecture-random",
                     device=torch.device("cpu"), dtype=torch.bfloat16)
    service = PetriService(lm, RunStore(work / "store-full"))
    out: dict = {"host_build_s": build_s, "weights_gib": sum(p.numel() * p.element_size()
                                                             for p in model.parameters()) / 2**30, "calls": {}}
    call = harness.GPU(duration=600)(full_frames)
    for precision in precisions:
        gpu_executor.serve(service, card_placement.CardPlacement("cuda", precision))
        for batch, prompt in shapes:
            rows = out["calls"].setdefault(f"{precision} {batch}x{prompt}", [])
            for _ in range(calls):
                try:
                    rows.append(one_call(call(batch, prompt, steps)))
                except Exception as err:  # keep the other calls' figures; say what this one met
                    rows.append({"error": f"{type(err).__name__}: {err}"[:300]})
                    break
            save(out)
    service.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="embedded,full")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--precisions", default="bf16,fp8-fast")
    parser.add_argument("--shapes", default="1x200,12x200", help="the full-size model's samples x prompt tokens")
    parser.add_argument("--device", default="cuda", help="where each call places the model (cpu: a smoke test)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    card_placement.place_on_card = timed_place(card_placement.place_on_card)
    result: dict = {"gpu": gpu_name(), "torch": torch.__version__, "steps": args.steps, "command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            try:
                if name == "embedded":
                    result["embedded"] = embedded_runs(args.calls, args.steps, Path(tmp), args.device)
                elif name == "full":
                    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]

                    def save(partial: dict) -> None:
                        result["full"] = partial
                        (args.out / "zerogpu_device.json").write_text(json.dumps(result, indent=2, default=str))

                    full_runs(args.calls, args.steps, args.precisions.split(","), shapes, Path(tmp), save)
            except Exception as err:  # keep what the other model measured
                result[f"{name}_error"] = f"{type(err).__name__}: {err}"
            (args.out / "zerogpu_device.json").write_text(json.dumps(result, indent=2, default=str))
            print(json.dumps(result.get(name, result.get(f"{name}_error")), indent=1, default=str)[:3000], flush=True)
    assert not torch.cuda.is_initialized(), "the main process initialised CUDA"


if __name__ == "__main__":
    main()
