"""``petri probe``: one-step slot reads on a pinned answer frame (issue 50, docs/probe.md).

- ``petri probe --request request.json``: read one request (the body of ``POST /api/probe``'s
  read, checked as that route and the Probe tab check it:
  :func:`petri.web.api.probe_requests.read_request`) and print the reads as JSON.
- ``petri probe --set assets/probe/events.jsonl --out DIR``: evaluate a labelled set; writes
  ``predictions.csv`` (row by row, flushed: a crash loses nothing read), ``summary.csv``,
  ``reliability.csv`` and ``evaluation.json``; prints accuracy, ECE and Brier per question.
  ``--compare-to`` another model (a name or folder) or another prompt configuration (a labelled-set
  file over the same items, e.g. other instructions or frame) evaluates that too and adds the exact
  McNemar test with the discordant items (``discordant.csv``, the second run under ``DIR/compare``).

``--order`` (``as_listed``, ``cyclic`` or ``permutations:N``; a request's default is its own field,
else as listed; a set's default is cyclic) and ``--min-mass`` (a read with less of the model's
probability on its labels answers null, "no answer"; default 0.5) apply to both.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

from petri.app.model_options import add_model_arguments, load_from_args
from petri.core.config import PetriConfig


def _samples(value: str):
    if value == "auto":
        return "auto"
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {number}")
    return number


def add_probe_command(commands, config: PetriConfig = PetriConfig()) -> None:
    probe = commands.add_parser(
        "probe", help="read the model's answer at slots of a pinned frame (one request, or evaluate a labelled set)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    what = probe.add_mutually_exclusive_group(required=True)
    what.add_argument("--request", help="a probe request (JSON): prints its reads as JSON")
    what.add_argument("--set", dest="labelled_set", help="a labelled set (.jsonl or .csv): evaluate it")
    probe.add_argument("--out", default=None, help="--set: output folder (default out/probe-<set name>); "
                       "--request: also write the JSON here")
    probe.add_argument("--samples", type=_samples, default=1, help="--set: noise draws per read, or 'auto' "
                       "(1, then 4 where the entropy over the alternatives exceeds 0.1); default 1")
    probe.add_argument("--steps", type=int, default=1, help="--set: denoising steps read; default 1")
    probe.add_argument("--seed", type=int, default=0, help="--set: base seed (repeat r uses seed + r)")
    probe.add_argument("--repeats", type=int, default=1, help="--set: reads of every item (repeatability); default 1")
    probe.add_argument("--compare-to", default=None, metavar="MODEL_OR_SET",
                       help="--set: a second configuration, tested against the first by exact McNemar: a labelled-set "
                       "file (.jsonl/.csv) over the same items (another prompt, frame or instructions) or a model")
    probe.add_argument("--order", default=None, help="as_listed, cyclic (every rotation of the alternatives, the "
                       "labels re-assigned) or permutations:N (N seeded random orders, N 2-32); an order-averaged read "
                       "averages each alternative's probability over the orders. Default: the request's own (as "
                       "listed), cyclic for --set")
    probe.add_argument("--min-mass", type=float, default=None, help="answer null (no answer) where less of the "
                       "model's probability than this lies on the labels (the mean over the orders); default: the "
                       "request's own, 0.5")
    probe.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_model_arguments(probe, config)


def _progress(label: str, quiet: bool):
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        if quiet:
            return
        seconds = time.perf_counter() - started
        print(f"\rprobe {label}: {done}/{total} reads, {seconds / done:.2f} s each", end="" if done < total else "\n",
              file=sys.stderr, flush=True)

    return report


def _evaluate(model, labelled, args, out: Path, label: str):
    from petri.core.probe import DEFAULT_MIN_MASS
    from petri.study.probe.probe_eval import EVAL_ORDER, evaluate, prediction_columns
    from petri.study.probe.probe_tables import PredictionWriter

    writer = PredictionWriter(out / "predictions.csv", prediction_columns(labelled))
    try:
        return evaluate(model, labelled, samples=args.samples, steps=args.steps, seed=args.seed,
                        repeats=args.repeats, order=args.order or EVAL_ORDER,
                        min_mass=DEFAULT_MIN_MASS if args.min_mass is None else args.min_mass,
                        on_item=_progress(label, args.quiet), on_rows=writer)
    finally:
        writer.close()


def _share(row: dict, name: str, low: str, high: str) -> str:
    """``row[name]`` with its interval ``[row[low], row[high]]``, two decimals each."""
    return f"{row[name]:.2f} [{row[low]:.2f}, {row[high]:.2f}]"


def _print_summary(evaluation, label: str) -> None:
    meta = evaluation.meta
    print(f"{label}: {meta['model']['model_id']}, {meta['items']} items, order {meta['order']}, min_mass "
          f"{meta['min_mass']:g}, {meta['seconds_per_read']:.2f} s per read")
    for row in evaluation.summary.to_dict("records"):
        share = partial(_share, row)
        print(f"  {row['question']}: accuracy {share('accuracy', 'wilson_low', 'wilson_high')} over "
              f"{row['answered']} answered of {row['n']} (coverage {share('coverage', 'coverage_low', 'coverage_high')};"
              f" with abstentions counted wrong {share('accuracy_with_abstentions', 'with_abstentions_low', 'with_abstentions_high')};"
              f" always the commonest gold answer {row['commonest_gold_share']:.2f})")
        print(f"    first listed answered {share('answers_first', 'answers_first_low', 'answers_first_high')} against "
              f"{share('gold_first', 'gold_first_low', 'gold_first_high')} for the gold answers; ECE {row['ece']:.2f}, "
              f"Brier {row['brier']:.2f} (answered items)"
              + (f", changed {row['changed_share']:.2f} over {row['repeats']} repeats" if row["repeats"] > 1 else ""))


def cmd_probe(args) -> int:
    if args.request is not None:
        from pydantic import ValidationError

        from petri.engine.probe import read_slots
        from petri.web.api.probe_requests import read_request
        from petri.web.errors import FieldError, request_error_message

        try:
            payload = json.loads(Path(args.request).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--request: cannot read {args.request}: {err}") from None
        if not isinstance(payload, dict):
            raise ValueError(f"--request: {args.request} holds no JSON object")
        overrides = {"order": args.order, "min_mass": args.min_mass}
        try:  # checked as POST /api/probe and the Probe tab check a read
            request = read_request({**payload, **{k: v for k, v in overrides.items() if v is not None}})
        except (ValidationError, FieldError) as err:
            raise ValueError(f"--request: {request_error_message(err)}") from None
        model = load_from_args(args)
        text = json.dumps(read_slots(model, request).to_dict(), indent=1, ensure_ascii=False)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n", encoding="utf-8")
        return 0
    return _cmd_set(args)


def _cmd_set(args) -> int:
    from petri.core.settings import MAX_SEED
    from petri.study.probe.probe_eval import compare_evaluations
    from petri.study.probe.probe_set import load_labelled_set
    from petri.study.probe.probe_tables import write_evaluation

    if args.steps < 1 or args.repeats < 1:
        raise ValueError("--steps and --repeats must be at least 1")
    if not 0 <= args.seed <= MAX_SEED:
        raise ValueError(f"--seed: must be between 0 and {MAX_SEED}, got {args.seed}")
    labelled = load_labelled_set(args.labelled_set)
    other_set = None
    if args.compare_to and Path(args.compare_to).suffix.lower() in (".jsonl", ".csv"):
        other_set = load_labelled_set(args.compare_to)
        if {i.item_id for i in other_set.items} != {i.item_id for i in labelled.items}:
            raise ValueError("--compare-to: the second set must hold the same item ids as --set")
    out = Path(args.out or f"out/probe-{labelled.name or 'set'}")
    model = load_from_args(args)
    first = _evaluate(model, labelled, args, out, "a")
    _print_summary(first, "a")
    comparison = None
    if args.compare_to:
        second_model = model if other_set is not None else load_from_args(argparse.Namespace(**{**vars(args), "model": args.compare_to}))
        second = _evaluate(second_model, other_set or labelled, args, out / "compare", "b")
        _print_summary(second, "b")
        write_evaluation(second, out / "compare", predictions=False)
        comparison = compare_evaluations(first, second, ("a", "b"))
        for entry in comparison["questions"]:
            print(f"  {entry['summary']}")
    written = write_evaluation(first, out, comparison, predictions=False)
    print(f"wrote {', '.join(str(p) for p in written.values())}")
    return 0
