"""The Architecture page's Layout block and layer diagram are made from the code
(``experiments/docs_layout.py``): the block names every folder of ``petri/`` with its layer and every
module in it, the diagram every package in its layer and every import between packages, so a move
or a new import that is not on the page fails."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "experiments"))

import docs_layout  # noqa: E402

import test_layers  # noqa: E402  (tests/ is on the path: pyproject's pythonpath)


def test_the_pages_layout_block_is_the_generated_one():
    block = docs_layout.page_block((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert block is not None, "docs/architecture.md has no layout block"
    assert block == docs_layout.layout_block(), "run: python experiments/docs_layout.py --write"


def test_the_layer_diagram_is_the_generated_one():
    committed = (REPO / "docs" / "images" / "layers.svg").read_text(encoding="utf-8")
    assert committed == docs_layout.diagram_svg(), "run: python experiments/docs_layout.py --write"


def test_the_diagrams_layers_are_the_ones_the_layer_test_enforces():
    """The diagram places packages by their docstring heads; tests/test_layers.py checks imports
    against its own LAYERS. Both must say the same, or the picture shows rules nobody checks."""
    assert docs_layout.layers() == test_layers.LAYERS


def test_the_diagrams_arrows_are_the_layer_tests_imports():
    """Every arrow is a run-time import between two packages, read the way tests/test_layers.py
    reads imports; none is missing and none is made up."""
    expected = set()
    for module, targets in test_layers.import_graph(type_only=False).items():
        for target in targets:
            a, b = (".".join(name.split(".")[:2]) for name in (module, target))
            if a != b:
                expected.add((a, b))
    assert docs_layout.package_imports() == expected
    layer = test_layers.LAYERS
    assert all(layer[a] >= layer[b] for a, b in expected)


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
    (package / "web" / "app.py").write_text("from petri.core import dish\n")
    monkeypatch.setattr(docs_layout, "PACKAGE", package)
    monkeypatch.setattr(docs_layout, "REPO", tmp_path)
    lines = docs_layout.layout_block().splitlines()
    start = lines.index("petri/")
    assert lines[start + 2:start + 8] == [
        "  core/             layer 1  the core things",
        "                    cancel dish",
        "  web/              layer 5  the edge",
        "                    app",
        "    ui/             The tabs",
        "                    dish",
    ]
    assert docs_layout.package_imports() == {("petri.web", "petri.core")}
    svg = docs_layout.diagram_svg()
    assert "petri.web imports petri.core" in svg and svg.count("marker-end=") == 1
