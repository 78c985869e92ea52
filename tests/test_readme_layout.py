"""The README's Layout section is made from the code (``experiments/readme_layout.py``): it names every
folder of ``petri/`` with its layer and every module in it, so a move that is not in the README fails."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "experiments"))

import readme_layout  # noqa: E402


def test_the_readmes_layout_block_is_the_generated_one():
    block = readme_layout.readme_block((REPO / "README.md").read_text(encoding="utf-8"))
    assert block is not None, "README.md has no layout block"
    assert block == readme_layout.layout_block(), "run: python experiments/readme_layout.py --write"


def test_the_block_names_every_module_under_its_folder_and_layer(tmp_path, monkeypatch):
    """A hand-made package of two layers: each folder's line carries its layer and docstring head,
    its modules follow, a sub-package sits indented under its parent."""
    package = tmp_path / "petri"
    for folder, doc in {"core": "Layer 1: the core things.\n\nMore.", "web": "Layer 5: the edge.",
                        "web/ui": "The tabs."}.items():
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text(f'"""{doc}"""\n')
    for module in ("core/dish.py", "core/cancel.py", "web/app.py", "web/ui/dish.py"):
        (package / module).write_text("")
    monkeypatch.setattr(readme_layout, "PACKAGE", package)
    lines = readme_layout.layout_block().splitlines()
    start = lines.index("petri/")
    assert lines[start + 2:start + 8] == [
        "  core/             layer 1  the core things",
        "                    cancel dish",
        "  web/              layer 5  the edge",
        "                    app",
        "    ui/             The tabs",
        "                    dish",
    ]
