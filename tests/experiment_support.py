"""Helper of the tests that check a script of ``experiments/`` (not a package): the script loaded
as a module, so a test can call its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def experiment_script(name: str):
    """``experiments/<name>.py`` loaded as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses (and the script's own sibling imports) look the module up here
    spec.loader.exec_module(module)
    return module
