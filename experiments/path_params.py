"""Parameters along the seed, study and probe paths (issue 61, item 1): each function's parameter
count (``self`` not counted) and names, read with :func:`inspect.signature` from the checkout on
``PYTHONPATH``; a function the checkout does not have prints ``-``.

    PYTHONPATH=$PWD python3 experiments/path_params.py
"""

from __future__ import annotations

import importlib
import inspect

PATHS = {
    "study": ["petri.web.gpu:run_study_job", "petri.app.service:PetriService.run_study",
              "petri.app.service:PetriService._study", "petri.app.service:PetriService.submit_study",
              "petri.study.execution.runner:run_study"],
    "probe": ["petri.web.api.probe:run_probe", "petri.app.service:PetriService.probe", "petri.app.probe:probe",
              "petri.engine.probe:read_slots", "petri.engine.probe:read_planned"],
    "seed": ["petri.web.gpu:run_seed", "petri.app.service:PetriService.seed", "petri.app.service:PetriService._seed",
             "petri.app.service:PetriService.submit_seed"],
}


def target(name: str):
    """The function ``module:qualname`` names, or None where the checkout has none."""
    module, _, qualname = name.partition(":")
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return inspect.unwrap(found)


def main() -> None:
    for path, names in PATHS.items():
        print(f"{path} path")
        for name in names:
            fn = target(name)
            if fn is None:
                print(f"  {name:45s}  -")
                continue
            params = [p for p in inspect.signature(fn).parameters if p != "self"]
            print(f"  {name:45s} {len(params):2d}  ({', '.join(params)})")


if __name__ == "__main__":
    main()
