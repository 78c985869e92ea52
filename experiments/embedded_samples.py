"""Sample outputs of a model with and without pinned anchors (for the model card), and the seconds
each batch took (the first call in the process pays a warm-up).

    python experiments/embedded_samples.py                      # the embedded model, seed 0
    python experiments/embedded_samples.py --model petri-tiny-mdm   # the embedded masked-diffusion model
    python experiments/embedded_samples.py --model PATH --samples 3 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from petri.core.dish import Dish, encode_prompt  # noqa: E402
from petri.engine.base import SampleRequest  # noqa: E402
from petri.engine.seeding import seed_dish  # noqa: E402
from petri.engine.torch.model import load_model  # noqa: E402

EVENT = "Only 90 units are in stock, but the customer ordered 120."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lm = load_model(args.model, device="cpu")
    settings = lm.default_settings()
    dish = Dish(("order", "inventory", "person"), EVENT)
    prompt = encode_prompt(lm.tokenizer, dish.prompt_text())
    started = time.perf_counter()
    free = lm.sample(SampleRequest(prompt.ids, [[] for _ in range(args.samples)], settings, args.seed))
    free_s = time.perf_counter() - started
    pinned = seed_dish(lm, dish, args.samples, settings, seed=args.seed)
    pinned_s = time.perf_counter() - started - free_s
    print(f"model {lm.model_id}; prompt {prompt.text!r}; settings {settings}")
    for title, traj, seconds in (("without anchors", free, free_s),
                                 ("with anchors order, inventory, person", pinned, pinned_s)):
        print(f"\n## {title} ({seconds:.2f} s)")
        for s, text in enumerate(traj.final_texts):
            layout = ", ".join(f"{a.concept}@{a.start}" for a in traj.anchors[s]) or "none"
            print(f"- steps {traj.steps[s]}, anchors {layout}: {text!r}")


if __name__ == "__main__":
    main()
