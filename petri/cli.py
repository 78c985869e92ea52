"""Command line: ``python -m petri seed ...`` (and the commands later issues add)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from petri.dish import DEFAULT_TEMPLATE, Dish, LayoutError
from petri.export import run_tables, write_run
from petri.models import ModelNotFoundError, load_model


def _concepts(value: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in value.split(","))


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="hub id (local cache only) or checkpoint folder; default: the embedded model")
    parser.add_argument("--device", default="auto", help="auto (cuda → mps → cpu), cuda, mps or cpu")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp16 on MPS, fp32 on CPU), bf16, fp16 or fp32")


def add_sampler_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sampler (defaults: the model's generation config)")
    group.add_argument("--steps", type=int, help="maximum denoising steps")
    group.add_argument("--entropy-bound", type=float)
    group.add_argument("--t-min", type=float)
    group.add_argument("--t-max", type=float)
    group.add_argument("--no-adaptive-stop", action="store_true", help="always run every step")
    group.add_argument("--no-thought-channel", action="store_true", help="do not pin the empty thought block (chat models)")


def settings_from_args(defaults, args):
    changes = {
        "max_denoising_steps": args.steps,
        "entropy_bound": args.entropy_bound,
        "t_min": args.t_min,
        "t_max": args.t_max,
    }
    settings = replace(defaults, **{k: v for k, v in changes.items() if v is not None})
    if args.no_adaptive_stop:
        settings = replace(settings, stability_threshold=None, confidence_threshold=None)
    if args.no_thought_channel:
        settings = replace(settings, pin_thought_channel=False)
    return settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m petri", description="Concept Petri Dish")
    commands = parser.add_subparsers(dest="command", required=True)
    seed = commands.add_parser("seed", help="sample one event with pinned concepts; print pair instability, write CSVs")
    seed.add_argument("--event", required=True, help="the event text the model reads")
    seed.add_argument("--concepts", required=True, type=_concepts, help="comma-separated, e.g. order,inventory,person")
    seed.add_argument("--samples", type=int, default=12)
    seed.add_argument("--template", default=DEFAULT_TEMPLATE, help="prompt template with {event} and {concepts}")
    seed.add_argument("--seed", type=int, default=0)
    seed.add_argument("--out", default=None, help="folder for the tidy CSVs and run.json")
    add_model_arguments(seed)
    add_sampler_arguments(seed)
    return parser


def cmd_seed(args) -> int:
    from petri.seeding import seed_dish

    dish = Dish(concepts=args.concepts, event=args.event, template=args.template)
    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    settings = settings_from_args(lm.default_settings(), args)
    traj = seed_dish(lm, dish, args.samples, settings, seed=args.seed)
    tables = run_tables([traj])
    print(f"model: {lm.model_id} on {lm.device} ({traj.timings['total_s']:.2f} s, steps {traj.steps.tolist()})")
    print(tables["pairs"][["pair", "n_segments", "instability"]].to_string(index=False))
    if args.out:
        written = write_run([traj], args.out)
        print(f"wrote {', '.join(str(p) for p in written.values())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "seed":
            return cmd_seed(args)
    except (LayoutError, ValueError, ModelNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 1
