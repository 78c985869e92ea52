"""Sample outputs of a model with and without pinned anchors (for the model card).

    python experiments/embedded_samples.py                      # the embedded model, seed 0
    python experiments/embedded_samples.py --model PATH --samples 3 --seed 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from petri.dish import Dish, encode_prompt  # noqa: E402
from petri.engine.torch_model import load_model  # noqa: E402
from petri.engine.torch_sampler import run_sampler  # noqa: E402
from petri.engine.seeding import seed_dish  # noqa: E402

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
    free = run_sampler(lm, prompt.ids, [[] for _ in range(args.samples)], settings, seed=args.seed)
    pinned = seed_dish(lm, dish, args.samples, settings, seed=args.seed)
    print(f"model {lm.model_id}; prompt {prompt.text!r}; settings {settings}")
    for title, traj in (("without anchors", free), ("with anchors order, inventory, person", pinned)):
        print(f"\n## {title}")
        for s, text in enumerate(traj.final_texts):
            layout = ", ".join(f"{a.concept}@{a.start}" for a in traj.anchors[s]) or "none"
            print(f"- steps {traj.steps[s]}, anchors {layout}: {text!r}")


if __name__ == "__main__":
    main()
