"""Mutation testing of the core files with mutmut 3, one target at a time, in a scratch copy.

mutmut 3 reads its settings from ``setup.cfg`` / ``pyproject.toml`` at the directory it runs in; the
repository keeps neither for mutmut, so this script copies the working tree to ``--work/<target>``,
writes a ``setup.cfg`` there naming the one module to mutate and only its own test files, and runs
``mutmut run --max-children 1`` (one worker: the development machine has two shared cores).
Every test run gets ``-x`` (stop at the first failure).

Afterwards it writes, into this folder's ``results/``:

* ``<target>.json``: counts per status (killed, survived, timeout, ...) and every mutant's status;
* ``<target>-survivors.diff``: ``mutmut show`` of each surviving (or timed-out / suspicious) mutant.

Usage (from the repository root)::

    python3 experiments/mutation/run.py metrics stats dish sampler
    python3 experiments/mutation/run.py --module petri/engine/torch/sampler.py \\
        --tests tests/engine/test_sampler.py tests/engine/test_sampler_parity.py --name sampler

Update ``TARGETS`` when a module moves or gains test files.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"

#: the tests every target of the sampler's modules runs, and what they leave out
SAMPLER_TESTS = ["tests/engine/test_sampler.py", "tests/engine/test_sampler_parity.py", "tests/engine/test_sampler_promises.py",
                 "tests/engine/test_mutants_sampler.py"]
# torch.compile takes ~10 s per run and checks only that compiling changes nothing
SAMPLER_DESELECT = ["--deselect", "tests/engine/test_sampler.py::test_compiled_forward_samples_the_same_tokens"]

# target name -> (module to mutate, the test files that exercise it, extra pytest arguments)
TARGETS: dict[str, tuple[str, list[str], list[str]]] = {
    "metrics": (
        "petri/measure/metrics.py",
        ["tests/measure/test_metrics.py", "tests/measure/test_tables.py", "tests/measure/test_mutants_metrics.py"],
        [],
    ),
    "stats": ("petri/stats/groups.py", ["tests/stats/test_stats.py", "tests/stats/test_mutants_stats.py"], []),
    "dish": (
        "petri/core/dish.py",
        ["tests/core/test_dish.py", "tests/engine/test_chat_path.py", "tests/core/test_mutants_dish.py"],
        [],
    ),
    "sampler": (
        "petri/engine/torch/sampler.py",
        SAMPLER_TESTS,
        SAMPLER_DESELECT,
    ),
    # the step pieces (adaptive stop, prompt encoding) moved out of the sampler
    "sampler_step": (
        "petri/engine/torch/step.py",
        SAMPLER_TESTS,
        SAMPLER_DESELECT,
    ),
    # token entropy, acceptance and the torch array operations, one module below the step pieces
    "sampler_array_ops": ("petri/engine/torch/array_ops.py", SAMPLER_TESTS, SAMPLER_DESELECT),
}

# mutmut 3 skips decorated functions; in the scratch copy these decorators become an assignment
# after the module (``f = deco(f)``, what ``@deco`` means), so that the function is mutated too.
UNDECORATE: dict[str, list[tuple[str, str]]] = {
    "sampler": [("@torch.no_grad()", "run_sampler")],
}

# what the scratch copy needs (from git): the package, the tests, the shipped model
COPY = ["petri", "tests", "assets"]


def copy_tree(dest: Path, ref: str) -> None:
    """Put the ``COPY`` folders as committed at ``ref`` into ``dest``, plus this work's own
    ``tests/**/test_mutants_*.py`` from the working tree (committed or not).

    Committed files, not the working tree: other people's uncommitted edits (a library line broken
    on purpose to check a test, say) must not leak into the run."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, *COPY], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    for test in (REPO / "tests").rglob("test_mutants_*.py"):
        target = dest / test.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(test, target)


def undecorate(path: Path, pairs: list[tuple[str, str]]) -> None:
    """Rewrite ``@decorator`` above ``def name`` in ``path`` as ``name = decorator(name)`` at the end."""
    text = path.read_text()
    for decorator, name in pairs:
        line = f"{decorator}\ndef {name}("
        if line not in text:
            raise SystemExit(f"{path}: no '{decorator}' right above 'def {name}(' to move")
        text = text.replace(line, f"def {name}(") + f"\n\n{name} = {decorator[1:]}({name})\n"
    path.write_text(text)


def write_config(work: Path, module: str, tests: list[str], extra: list[str]) -> None:
    """``setup.cfg`` for mutmut: mutate only ``module``; run only ``tests`` (those that exist at
    the copied commit) with ``-x`` and the ``extra`` pytest arguments."""
    existing = [t for t in tests if (work / t).exists()]
    lines = [
        "[mutmut]",
        "source_paths=petri",
        f"only_mutate={module}",
        "also_copy=\n    assets",
        "pytest_add_cli_args_test_selection=\n" + "\n".join(f"    {t}" for t in existing),
        "pytest_add_cli_args=\n" + "\n".join(f"    {a}" for a in ["-x", "-p", "no:cacheprovider", "-q", *extra]),
        "timeout_multiplier=5.0",
        "timeout_constant=30.0",
        "use_git_change_detection=false",
    ]
    (work / "setup.cfg").write_text("\n".join(lines) + "\n")


def collect(work: Path, module: str) -> dict:
    """Read mutmut's per-mutant exit codes for ``module`` from ``work/mutants``."""
    from mutmut.stats import status_by_exit_code

    meta = json.loads((work / "mutants" / (module + ".meta")).read_text())
    status = {name: status_by_exit_code[code] for name, code in sorted(meta["exit_code_by_key"].items())}
    return {"module": module, "counts": dict(Counter(status.values())), "mutants": status}


def show(work: Path, names: list[str], env: dict) -> str:
    """``mutmut show`` of each mutant in ``names``, concatenated."""
    parts = []
    for name in names:
        out = subprocess.run(["mutmut", "show", name], cwd=work, env=env, capture_output=True, text=True)
        parts.append(out.stdout.strip() + "\n")
    return "\n".join(parts)


def run_target(
    name: str, module: str, tests: list[str], extra: list[str], work_root: Path, fresh: bool, ref: str
) -> dict:
    """Copy, configure, run mutmut on one module; write and return its summary."""
    work = work_root / name
    if fresh and work.exists():
        shutil.rmtree(work)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", ref], capture_output=True, text=True).stdout.strip()
    copy_tree(work, commit)
    if name in UNDECORATE:
        undecorate(work / module, UNDECORATE[name])
    write_config(work, module, tests, extra)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONDONTWRITEBYTECODE="1")
    print(f"[mutation] {name}: {module} against {tests} in {work}", flush=True)
    subprocess.run(["nice", "-n", "10", "mutmut", "run", "--max-children", "1"], cwd=work, env=env, check=False)
    summary = collect(work, module)
    summary["tests"] = [t for t in tests if (work / t).exists()]
    summary["pytest_args"] = extra
    summary["ref"] = commit
    summary["mutmut"] = importlib.metadata.version("mutmut")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(summary, indent=1) + "\n")
    left = [m for m, s in summary["mutants"].items() if s != "killed"]
    (RESULTS / f"{name}-survivors.diff").write_text(show(work, left, env))
    print(f"[mutation] {name}: {summary['counts']}", flush=True)
    return summary


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", help=f"names from TARGETS: {', '.join(TARGETS)}")
    ap.add_argument("--module", help="a module path to mutate instead of a named target")
    ap.add_argument("--tests", nargs="+", default=[], help="its test files (with --module)")
    ap.add_argument("--name", help="result name (with --module); default: the module's stem")
    ap.add_argument("--pytest-args", nargs="+", default=[], help="extra pytest arguments (with --module)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/mut-work"), help="scratch folder")
    ap.add_argument("--resume", action="store_true", help="keep an earlier scratch copy's results")
    ap.add_argument("--ref", default="HEAD", help="the commit whose petri/, tests/, assets/ are copied")
    args = ap.parse_args(argv)
    jobs = [(t, *TARGETS[t]) for t in args.targets]
    if args.module:
        jobs.append((args.name or Path(args.module).stem, args.module, args.tests, args.pytest_args))
    if not jobs:
        ap.error("name a target or give --module")
    for name, module, tests, extra in jobs:
        run_target(name, module, tests, extra, args.work, fresh=not args.resume, ref=args.ref)


if __name__ == "__main__":
    sys.exit(main())
