"""Which mutants one test file kills on its own, in a scratch copy that ``run.py`` left behind.

mutmut 3 compiles every mutant into ``<work>/<target>/mutants`` behind a trampoline that picks the
active one from the ``MUTANT_UNDER_TEST`` environment variable; this runs the given test file once
per mutant name with that variable set and prints ``killed`` / ``SURVIVED`` for each. The test
file is first copied from the working tree into the scratch copy.

Usage (after ``run.py <target>``)::

    python3 experiments/mutation/attribute.py metrics tests/measure/test_mutants_metrics.py \\
        petri.measure.metrics.x__steps__mutmut_13 petri.measure.metrics.x_step_sum__mutmut_22
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", help="the scratch copy's name (a run.py target)")
    ap.add_argument("test_file", help="the test file to run, relative to the repository root")
    ap.add_argument("mutants", nargs="+", help="mutant names as mutmut prints them")
    ap.add_argument("--work", type=Path, default=Path("/tmp/mut-work"), help="scratch folder")
    args = ap.parse_args(argv)
    where = args.work / args.target / "mutants"
    repo = Path(__file__).resolve().parents[2]
    test_path = args.test_file.split("::")[0]
    shutil.copy2(repo / test_path, where / test_path)  # the working tree's version of the test file
    survivors = 0
    for name in args.mutants:
        env = dict(os.environ, MUTANT_UNDER_TEST=name, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
        rc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", args.test_file],
            cwd=where, env=env, capture_output=True,
        ).returncode
        status = "killed" if rc == 1 else ("SURVIVED" if rc == 0 else f"error (pytest exit {rc})")
        survivors += rc == 0
        print(f"{status:10s} {name}", flush=True)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
