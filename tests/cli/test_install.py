"""``pip install .`` gives a working library and ``petri`` command, from any directory.

A fresh virtual environment that sees the running interpreter's packages (torch and friends are
not downloaded again) gets the project built as a wheel and installed (no editable link to the
checkout). It sees them through a ``.pth`` file naming the running interpreter's site folders, so
it works whether the requirements went into the system Python or into a virtualenv
(``system_site_packages`` would see only the base interpreter's, without a virtualenv's pandas). From a folder outside the checkout, the
installed ``petri`` command seeds the embedded
model that the wheel installed as data files, and ``import petri`` resolves to the installed copy.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def see_running_packages(env_dir: Path) -> Path:
    """Write a ``.pth`` into ``env_dir``'s site-packages naming this interpreter's site folders
    (a virtualenv's or the system's, the user's, and any a ``.pth`` put on ``sys.path``). Plain path lines: the ``.pth`` files inside
    those folders (an editable install of this checkout) are not run, so the wheel stays the petri
    that imports."""
    folders = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else []),
               *(p for p in sys.path if "site-packages" in p or "dist-packages" in p)]  # those a .pth added
    target = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    pth = target / "running-interpreter-packages.pth"
    pth.write_text("".join(f"{f}\n" for f in dict.fromkeys(folders) if Path(f).is_dir()), encoding="utf-8")
    return pth


#: the checkout's own working folders, ignored where they sit only (``petri/runs`` is a package,
#: ``assets/studies/results`` holds the shipped run the wheel installs)
IGNORED_IN = {REPO: {".git", "build", "runs", "out", ".device-carry", ".whl", "data"}, REPO / "experiments": {"results"}}
ANYWHERE = shutil.ignore_patterns("*.egg-info", "__pycache__")


def not_in_a_wheel(folder: str, names: list[str]) -> set[str]:
    """``shutil.copytree``'s ignore: what a clean copy of the tree leaves out."""
    return {n for n in names if n in IGNORED_IN.get(Path(folder), ())} | set(ANYWHERE(folder, names))


def test_the_copy_keeps_nested_folders_named_like_the_top_level_ones():
    assert not_in_a_wheel(str(REPO), ["runs", "petri", "build", "results"]) == {"runs", "build"}
    assert not_in_a_wheel(str(REPO / "petri"), ["runs", "core", "__pycache__"]) == {"__pycache__"}
    assert not_in_a_wheel(str(REPO / "experiments"), ["results", "x.py"]) == {"results"}
    assert not_in_a_wheel(str(REPO / "assets" / "studies"), ["results"]) == set()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The virtual environment's folder, with the project installed from a wheel."""
    root = tmp_path_factory.mktemp("install")
    env_dir = root / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=True).create(env_dir)
    see_running_packages(env_dir)
    # `pip install .` is "build a wheel, install it": the wheel is built with this interpreter's
    # setuptools (no download), then installed into the fresh environment by its own pip.
    # (from a clean copy of the tree: an in-tree build/ folder can carry stale modules into a wheel)
    source = root / "source"
    shutil.copytree(REPO, source, ignore=not_in_a_wheel)
    wheels = root / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)]
    done = subprocess.run(build, capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = wheels.glob("concept_petri_dish-*.whl")
    install = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)]
    done = subprocess.run(install, capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return env_dir


def run_outside(env_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PETRI_ASSETS")}
    return subprocess.run(list(args), capture_output=True, text=True, timeout=600, cwd=cwd, env=environment)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed, tmp_path):
    done = run_outside(
        installed, str(installed / "bin" / "python"), "-c",
        "import json, petri, petri.core.paths; from petri.web.ui.study_tab.shipped import load_shipped, shipped_study_dir; "
        "print(json.dumps([petri.__file__, str(petri.core.paths.embedded_model_path()), "
        "str(petri.core.paths.embedded_model_named('petri-tiny-mdm')), str(shipped_study_dir()), "
        "len(load_shipped(shipped_study_dir()).events)]))",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    package_file, model_path, masked_path, shipped, shipped_events = json.loads(done.stdout)
    # the Study tab's committed run comes with the wheel (it used to be read from experiments/)
    assert Path(shipped) == installed / "share" / "concept-petri-dish" / "assets" / "studies" / "results" / "inventory_order-en-petri-tiny"
    import pandas as pd

    assert shipped_events == len(pd.read_csv(REPO / "assets" / "studies" / "results" / "inventory_order-en-petri-tiny" / "events.csv"))
    assert Path(masked_path) == installed / "share" / "concept-petri-dish" / "assets" / "petri-tiny-mdm"
    assert sorted(p.name for p in Path(masked_path).iterdir()) == sorted(p.name for p in (REPO / "assets" / "petri-tiny-mdm").iterdir())
    assert Path(package_file).is_relative_to(installed), package_file
    assert Path(model_path) == installed / "share" / "concept-petri-dish" / "assets" / "petri-small"
    assert (Path(model_path) / "model.safetensors").stat().st_size == (REPO / "assets" / "petri-small" / "model.safetensors").stat().st_size


def test_the_petri_command_seeds_the_embedded_model_from_anywhere(installed, tmp_path):
    petri = str(installed / "bin" / "petri")
    help_text = run_outside(installed, petri, "--help", cwd=tmp_path)
    assert help_text.returncode == 0 and all(c in help_text.stdout for c in ("seed", "study", "serve"))
    done = run_outside(
        installed, petri, "seed", "--event", "The order was shipped on time.", "--concepts", "order,inventory",
        "--samples", "2", "--steps", "3", "--device", "cpu", "--out", str(tmp_path / "out"), cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "model: petri-small" in done.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["pairs.csv", "positions.csv", "run.json", "samples.csv", "segments.csv"]
