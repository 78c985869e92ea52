"""The ``petri`` command (also ``python -m petri``): ``seed`` (one event), ``study FILE`` (a study
file), ``probe`` (slot reads on a pinned frame, :mod:`petri.cli.probe`), ``power`` / ``restat`` / ``paired`` (statistics of stored study
folders), ``replay RUN_ID`` (a stored run step by step: GIF, figure or table) and ``serve`` (the web app, as ``python app.py``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from petri.app.model_options import add_model_arguments, load_from_args
from petri.cli.options import add_sampler_arguments, settings_from_args
from petri.cli.probe import add_probe_command, cmd_probe
from petri.core.config import ConfigError, PetriConfig
from petri.core.dish import DEFAULT_TEMPLATE, Dish, LayoutError
from petri.core.paths import use_assets_dir
from petri.engine.base import BackendUnavailableError, ModelNotFoundError, SamplingModel
from petri.runs.export import run_tables, token_decoder, write_run
from petri.runs.store import StoreError
from petri.study.execution.executors import ExecutorError

if TYPE_CHECKING:
    from petri.study.execution.executors import StudyExecutor


def _concepts(value: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in value.split(","))


def build_parser(config: PetriConfig = PetriConfig()) -> argparse.ArgumentParser:
    """The ``petri`` command's options, the model options' defaults from ``config``
    (:func:`petri.app.model_options.add_model_arguments`)."""
    parser = argparse.ArgumentParser(prog="petri", description="Concept Petri Dish")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "serve", add_help=False, help="serve the web app (UI + HTTP API); `petri serve --help` lists its options"
    )
    seed = commands.add_parser("seed", help="sample one event with pinned concepts; print pair instability, write CSVs")
    seed.add_argument("--event", required=True, help="the event text the model reads")
    seed.add_argument("--concepts", required=True, type=_concepts, help="comma-separated, e.g. order,inventory,person")
    seed.add_argument("--samples", type=int, default=12)
    seed.add_argument("--template", default=DEFAULT_TEMPLATE, help="prompt template with {event} and {concepts}")
    seed.add_argument("--seed", type=int, default=0)
    seed.add_argument("--out", default=None, help="folder for the tidy CSVs and run.json")
    add_model_arguments(seed, config)
    add_sampler_arguments(seed)

    study = commands.add_parser(
        "study",
        help="run a study file (events × templates × samples), resumable; write report.md, CSVs and figures",
        description="Run a study file on a model. Every finished (event, template) batch is committed to the run "
        "store before the next starts; rerunning the same command resumes where it stopped.",
    )
    study.add_argument("file", help="study file (JSON; see assets/studies/README.md)")
    study.add_argument("--out", default=None, help="output folder for report.md, CSVs, run.json and figures/ (default: out/<study id>)")
    study.add_argument("--store", default="runs/store", help="run store folder (SQLite); default: runs/store")
    study.add_argument("--samples", type=int, default=12, help="shuffled samples per (event, template); default 12")
    study.add_argument("--seed", type=int, default=0, help="base seed; each batch's seed is derived from it and the ids")
    study.add_argument("--templates", type=_ids, default=None, help="comma-separated template ids to run (default: all)")
    study.add_argument("--top-n", type=int, default=20, help="top-N nouns per template for the Jaccard; default 20")
    study.add_argument("--no-images", action="store_true", help="write HTML figures only (no PNG/SVG attempt)")
    study.add_argument("--quiet", action="store_true", help="no progress bar")
    study.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); "
                       "keep it the same when resuming for bit-identical numbers")
    add_model_arguments(study, config)
    add_sampler_arguments(study)
    add_ray_arguments(study)
    add_statistics_commands(commands)
    add_probe_command(commands, config)

    replay = commands.add_parser(
        "replay", help="a stored run's denoising, step by step: GIF/MP4 animation, trajectory figure or steps table",
        description="Replay a stored run from the run store (nothing is sampled): --out's suffix picks what is "
        "written: .gif (or .mp4, needs ffmpeg) one frame per step of --sample; .html/.png/.svg the whole-trajectory "
        "figure (PNG/SVG need a Chromium); .csv/.parquet the per-step table of every sample.",
    )
    replay.add_argument("run_id", help="the run id (petri seed/study, the API or the UI's Runs tab show it)")
    replay.add_argument("--store", default="runs/store", help="run store folder (SQLite); default: runs/store")
    replay.add_argument("--event", type=int, default=0, help="the event (0 for a dish, 0/1 for a comparison)")
    replay.add_argument("--sample", type=int, default=0, help="the sample, numbered from 0")
    replay.add_argument("--out", required=True, help="output file: .gif, .mp4, .html, .png, .svg, .csv or .parquet")
    replay.add_argument("--frame-ms", type=int, default=400, help="milliseconds per frame of the animation")
    replay.add_argument("--tokenizer", default=None, help="checkpoint folder or cached hub id whose tokenizer "
                        "decodes the tokens (default: the run's model id)")
    return parser


def _ints(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None


def add_statistics_commands(commands) -> None:
    """``petri power``, ``petri restat`` and ``petri paired``: statistics of stored study folders."""
    power = commands.add_parser("power", help="power of the headline test by simulation from a pilot study's folder",
                                description="Resample the pilot's events and templates to estimate the power of the "
                                "event-level test for a grid of designs; seeded and reproducible.")
    power.add_argument("results_dir", help="output folder of `petri study` (segments.csv, run.json)")
    power.add_argument("--events", type=_ints, default=(6, 12, 24, 48, 96), help="events per group (a paired study: events) to try")
    power.add_argument("--templates", type=_ints, default=None, help="templates to try (default 1, pilot's, twice)")
    power.add_argument("--effect", type=float, default=None, help="effect (b - a, instability units); default: the pilot's")
    power.add_argument("--sims", type=int, default=1000, help="simulated studies per design; default 1000")
    power.add_argument("--alpha", type=float, default=0.05)
    power.add_argument("--seed", type=int, default=0)
    power.add_argument("--json", default=None, help="also write the result as JSON to this file")
    power.add_argument("--condition", default=None, help="paired study: the condition compared with the reference "
                       "(default: the last); the power is that of the paired Wilcoxon test on event differences")
    restat = commands.add_parser("restat", help="re-analyse a study folder from its CSVs (no resampling): "
                                 "statistics.json, pair_tests.csv and report.md's statistics section")
    restat.add_argument("results_dir")
    paired = commands.add_parser("paired", help="paired tests of two runs of one study (Wilcoxon, exact McNemar)")
    paired.add_argument("results_a")
    paired.add_argument("results_b")


def cmd_statistics(args) -> int:
    if args.command == "paired":
        from petri.study.results.paired_runs import compare_runs

        out = compare_runs(args.results_a, args.results_b)
        print(out["wilcoxon"]["summary"])
        print(out["mcnemar"]["summary"])
        return 0
    if args.command == "restat":
        from petri.study.results.paired_statistics import paired_from_folder, write_paired
        from petri.study.results.statistics import load_results, restat

        paired = paired_from_folder(args.results_dir)
        if paired is not None:
            write_paired(paired, args.results_dir)
            print("\n".join(paired.lines()))
            print(f"wrote paired_summary.csv, paired_event_means.csv and paired_statistics.json in {args.results_dir}")
            if len(load_results(args.results_dir)[1]) < 2:
                return 0  # one group: no group statistics
        stats = restat(args.results_dir)
        print(stats.comparison.event.summary())
        if stats.mixed is not None:
            print(stats.mixed.summary())
        print(f"wrote statistics.json, pair_tests.csv and report.md's statistics section in {args.results_dir}")
        return 0
    from petri.stats.mixed import cell_values
    from petri.stats.power import power_from_cells
    from petri.study.results.paired_statistics import paired_from_folder
    from petri.study.results.statistics import load_results

    paired = paired_from_folder(args.results_dir, n_sims=args.sims, power_events=args.events, effect=args.effect,
                                alpha=args.alpha, seed=args.seed, power_condition=args.condition)
    if paired is not None:  # a within-event study: the power of the paired test
        if args.templates is not None:
            raise ValueError("--templates: a paired study's power resamples events (templates as in the pilot)")
        result = paired.power
        if result is None:
            raise ValueError(f"RESULTS_DIR {args.results_dir}: {'; '.join(paired.notes)}")
        return _print_power(result, args.json)
    if args.condition is not None:
        raise ValueError("--condition: the study in RESULTS_DIR has no conditions (it is not a paired study)")

    segments, groups, _, _ = load_results(args.results_dir)
    cells_power = power_from_cells(cell_values(segments), groups, events=args.events, templates=args.templates,
                                   effect=args.effect, n_sims=args.sims, alpha=args.alpha, seed=args.seed)
    return _print_power(cells_power, args.json)


def _print_power(result, json_path: str | None) -> int:
    """Print a power result's designs, summary and method (and write it as JSON to ``json_path``)."""
    import json

    import pandas as pd

    print(pd.DataFrame(result.designs).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(result.summary())
    print(f"method: {result.method}")
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump(result.to_dict(), fh, indent=1)
    return 0


# --- Ray (issue 13): the study's batches on a cluster; everything Ray-specific is below ---------

def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray cluster (optional; pip install \"concept-petri-dish[ray]\")")
    group.add_argument(
        "--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
        help="run the batches on Ray workers: no value or 'local' starts Ray on this machine, 'auto' joins the cluster "
        "started here with `ray start` (or RAY_ADDRESS), HOST:PORT joins a head node; this process alone writes the store",
    )
    group.add_argument("--workers", type=int, default=None, help="Ray workers, each holding one model (one per GPU with "
                       "--device cuda/auto on a GPU cluster); default: as many as the cluster offers")


def ray_executor_from_args(args):
    """A :class:`~petri.study.execution.ray_executor.RayExecutor` for ``--ray/--workers`` (refusals name the option), or None."""
    if args.ray is None:
        if args.workers is not None:
            raise ValueError("--workers needs --ray (without it the study runs in this process)")
        return None
    from petri.app.model_options import spec_from_args
    from petri.study.execution.ray_executor import RayExecutor

    return RayExecutor(spec_from_args(args), address=args.ray, workers=args.workers)


def print_worker_summary(executor) -> None:
    per = ", ".join(f"{n} on {executor.hosts.get(n, '?')}: {k}" for n, k in sorted(executor.delivered.items()))
    print(f"{executor.name}: batches {per or 'none (all resumed)'}"
          + (f"; {len(executor.reruns)} batches rerun after a worker died" if executor.reruns else ""))

# --- end Ray -------------------------------------------------------------------------------------


def _ids(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def cmd_seed(args) -> int:
    from petri.engine.seeding import seed_dish

    dish = Dish(concepts=args.concepts, event=args.event, template=args.template)
    lm = load_from_args(args)
    settings = settings_from_args(lm.default_settings(), args, lm.canvas_length)
    traj = seed_dish(lm, dish, args.samples, settings, seed=args.seed)
    tables = run_tables([traj])
    print(f"model: {lm.model_id} on {lm.device} ({traj.timings['total_s']:.2f} s, steps {traj.steps.tolist()})")
    print(tables["pairs"][["pair", "n_segments", "instability"]].to_string(index=False))
    if args.out:
        written = write_run([traj], args.out, token_text=token_decoder(lm.tokenizer, lm.model_id, [traj]))
        print(f"wrote {', '.join(str(p) for p in written.values())}")
    return 0


def cmd_study(args) -> int:
    import shlex
    from dataclasses import replace

    from petri.core.watch import Watch
    from petri.runs.store import RunStore
    from petri.study.execution.runner import run_study
    from petri.study.plan import StudyPlan
    from petri.study.results.report import write_study
    from petri.study.schema import load_study

    study = load_study(args.file)  # malformed files are refused before the model is even loaded
    if args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    # so are a language whose noun analyser is not installed and an unknown template (the plan's checks)
    plan = StudyPlan(study, args.samples, args.seed, templates=args.templates)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        from petri.engine.torch.device import set_cpu_threads

        set_cpu_threads(args.threads)
    store = RunStore(args.store)  # an unwritable store is reported before the (slow) model load
    executor = None
    command = "python -m petri " + " ".join(shlex.quote(a) for a in (args.argv or []))
    try:
        executor = ray_executor_from_args(args)  # cluster refusals come before any sampling
        lm = executor or load_from_args(args)
        settings = (settings_from_args(executor.facts().default_settings, args) if executor  # checked again as it samples
                    else settings_from_args(lm.default_settings(), args, lm.canvas_length))
        out = args.out or f"out/{study.id}"
        result = run_study(lm, replace(plan, settings=settings), store, watch=Watch(show_progress=not args.quiet))
        if executor:
            print_worker_summary(executor)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished batch is in the run store ({store.path}); resume with the same "
              f"command:\n  {command}", file=sys.stderr, flush=True)
        return 130
    finally:
        store.close()
        if executor:
            executor.close()
    decoder = _study_decoder(lm, executor, result)
    outputs = write_study(result, out, top_n=args.top_n, images=not args.no_images, command=command, token_text=decoder)
    comp = outputs.analysis.comparison
    print(f"model: {result.model_id} on {result.device}; run {result.run_id}: {result.computed} batches computed, {result.resumed} resumed")
    if outputs.analysis.paired is not None:
        print("\n".join(outputs.analysis.paired.lines()))
    if comp is not None:
        print(comp.event.summary())
        print(comp.segment.summary())
    for note in outputs.notes:
        print(f"note: {note}")
    n_csv = sum(p.suffix == ".csv" for p in outputs.tables.values())
    print(f"wrote {outputs.report}, {n_csv} CSVs, run.json and {len(outputs.figures)} figures in {outputs.out_dir}")
    return 0


def _study_decoder(lm: SamplingModel | StudyExecutor, executor, result):
    """The token decoder of a finished study's positions table (``final_token``). A Ray driver holds
    no model, so it loads only the tokenizer of the workers' checkpoint (None when it has none)."""
    trajectories = [b.trajectory for b in result.batches]
    if executor is None:
        model = cast(SamplingModel, lm)  # no executor: lm is the loaded model
        return token_decoder(model.tokenizer, model.model_id, trajectories)
    from petri.engine.torch.model import load_tokenizer

    try:
        tokenizer = load_tokenizer(executor.spec.name or result.model_id)
    except ModelNotFoundError as err:
        print(f"warning: positions.csv's final_token is left empty: {err}", file=sys.stderr)
        return None
    return token_decoder(tokenizer, result.model_id, trajectories)


def cmd_replay(args) -> int:
    from petri.runs.store import RunStore, check_run_id
    from petri.study.execution.runner import stored_conditions
    from petri.web.replay_files import replay_suffixes, write_replay

    suffix = args.out.rsplit(".", 1)[-1].lower() if "." in args.out else ""
    if suffix not in replay_suffixes():
        raise ValueError(f"--out must end in one of {', '.join('.' + s for s in replay_suffixes())}, got {args.out!r}")
    store = RunStore(args.store)
    try:
        stored = store.load_events(check_run_id(args.run_id))
        run = store.get_run(args.run_id)
    finally:
        store.close()
    if not stored:
        raise ValueError(f"run_id: no stored run {args.run_id!r} with events in {args.store}")
    path, note = write_replay(stored, args.event, args.sample, args.out, tokenizer=args.tokenizer,
                              frame_ms=args.frame_ms, conditions=stored_conditions(run, [k for k, _, _ in stored]))
    print(f"wrote {path}" + (f" ({note})" if note else ""))
    return 0


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The ``petri`` command: the configuration read once from ``environ`` (default ``os.environ``;
    :class:`petri.core.config.PetriConfig`), then ``argv``'s command; 2 on an error."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = PetriConfig.from_env(os.environ if environ is None else environ)
        parser = build_parser(config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if argv[:1] == ["serve"]:  # the server has its own options (shared with app.py)
        from petri.web.server import main as serve

        return serve(argv[1:], prog="petri serve", config=config)
    use_assets_dir(config.assets)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        if args.command == "seed":
            return cmd_seed(args)
        if args.command == "study":
            return cmd_study(args)
        if args.command in ("power", "restat", "paired"):
            return cmd_statistics(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "probe":
            return cmd_probe(args)
    except (LayoutError, ValueError, ModelNotFoundError, StoreError, BackendUnavailableError, ExecutorError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 1
