"""The Architecture page's generated parts, made from the code: the Layout block (per folder of
``petri/``, its layer and the first paragraph of its ``__init__`` docstring, then the modules it
holds) and the layer diagram (``docs/images/layers.svg``: each package in its layer's row, an arrow
for each package that another one imports at run time).

    python experiments/docs_layout.py            # print the block
    python experiments/docs_layout.py --write    # replace the block in docs/architecture.md and the diagram

``tests/docs/test_layout.py`` fails when the page's block or the diagram differs from what this
makes, so a moved, added or removed module (or a new import between packages) shows on the
Architecture page or the tests go red.
"""

from __future__ import annotations

import argparse
import ast
import re
import textwrap
from html import escape
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "petri"
PAGE = REPO / "docs" / "architecture.md"
DIAGRAM = REPO / "docs" / "images" / "layers.svg"
BEGIN = "<!-- layout: made by experiments/docs_layout.py -->"
END = "<!-- /layout -->"
NAME_WIDTH = 20
WIDTH = 104
HEAD = "app.py              what a Space runs: petri.web.server.main (the same as `petri serve`)"
TAIL = [
    "assets/             the embedded models (petri-small, petri-tiny and their -mdm twins), the study files, the",
    "                    screenshots",
    "docs/               this site (MkDocs Material; the API reference is made from the docstrings)",
    "tests/              pytest, one folder per folder of petri/ (and reliability/, experiments/, docs/); markers by",
    "                    folder",
    "experiments/        corpus + training recipe, studies, benchmarks, mutation testing, and their results",
]
LAYER = re.compile(r"^Layer (\d): (.*)$", re.S)


def docstring_head(folder: Path) -> tuple[int | None, str]:
    """(layer, summary) of a package: the first paragraph of its ``__init__`` docstring, with the
    leading ``Layer N:`` read off as the layer (None for a sub-package, which has no layer of its own)."""
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    doc = " ".join(doc.split("\n\n")[0].split()).replace("``", "`")
    layer = None
    if match := LAYER.match(doc):
        layer, doc = int(match.group(1)), match.group(2)
    return layer, doc.rstrip(".")


def modules_of(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")


def folder_lines(folder: Path, depth: int) -> list[str]:
    """The block's lines for one folder and, indented under it, its sub-folders."""
    layer, summary = docstring_head(folder)
    label = "  " * depth + folder.name + "/"
    text = (f"layer {layer}  " if layer is not None else "") + summary
    indent = " " * NAME_WIDTH
    lines = textwrap.wrap(text, WIDTH, initial_indent=label.ljust(NAME_WIDTH),
                          subsequent_indent=indent)
    modules = modules_of(folder)
    if modules:
        lines += textwrap.wrap(" ".join(modules), WIDTH, initial_indent=indent, subsequent_indent=indent)
    for sub in sorted(p.parent for p in folder.glob("*/__init__.py")):
        lines += folder_lines(sub, depth + 1)
    return lines


def top_folders() -> list[Path]:
    """The layer folders of ``petri/``, lowest layer first."""
    return sorted((p.parent for p in PACKAGE.glob("*/__init__.py")),
                  key=lambda f: (docstring_head(f)[0] or 0, f.name))


def layout_block() -> str:
    """The whole fenced block, between its two marker comments."""
    lines = [HEAD, "petri/", "  __main__.py       `python -m petri`: petri.cli.main"]
    for folder in top_folders():
        lines += folder_lines(folder, 1)
    return "\n".join([BEGIN, "```", *lines, *TAIL, "```", END])


def page_block(text: str) -> str | None:
    start, end = text.find(BEGIN), text.find(END)
    return text[start:end + len(END)] if start >= 0 and end > start else None


# --------------------------------------------------------------------------- the layer diagram


def layers() -> dict[str, int]:
    """``petri.<folder>`` → its layer (from the ``Layer N:`` docstring heads), ``petri.__main__`` 5."""
    found = {f"petri.{f.name}": docstring_head(f)[0] for f in top_folders()}
    return {**found, "petri.__main__": 5}


def _package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _runtime_imports(path: Path, module: str) -> set[str]:
    """The ``petri`` modules ``path`` imports outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name.startswith("petri.")}


def package_imports() -> set[tuple[str, str]]:
    """(importer, imported) for every pair of different packages of ``petri/`` (or ``petri.__main__``)
    where a module of the first imports a module of the second at run time."""
    edges = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module == "petri":
            continue
        for target in _runtime_imports(path, module):
            a, b = _package_of(module), _package_of(target)
            if a != b and b != "petri":
                edges.add((a, b))
    return edges


BOX_W, BOX_H, GAP, ROW_H, LEFT, TOP = 118, 36, 26, 92, 230, 52
#: each row's first box, in box widths from the left: the engine and the application stand apart, so that
#: arrows into the layers below pass beside their boxes, not through them
SHIFT = {1: 0, 2: 3, 3: 0.5, 4: 3, 5: 0}
COLOURS = ["#d84315", "#6a1b9a", "#1565c0", "#2e7d32", "#ef6c00", "#00838f", "#ad1457", "#4e342e", "#37474f"]


def layer_titles() -> dict[int, str]:
    return {1: "numpy, pandas, scipy", 2: "the engine (torch, MLX)", 3: "studies and runs",
            4: "the application", 5: "the edges"}


def diagram_svg() -> str:
    """The layer diagram as SVG text: one row a layer (5 at the top), one box a package, an arrow
    from each package to each package it imports."""
    layer_of = layers()
    rows: dict[int, list[str]] = {}
    for name, layer in sorted(layer_of.items(), key=lambda kv: (kv[1], kv[0])):
        rows.setdefault(layer, []).append(name)
    top_layer = max(rows)
    width = LEFT + max(SHIFT.get(layer, 0) + len(r) for layer, r in rows.items()) * (BOX_W + GAP) + 10
    height = TOP + (top_layer - 1) * ROW_H + BOX_H + 24
    place = {}
    for layer, names in rows.items():
        y = TOP + (top_layer - layer) * ROW_H
        for i, name in enumerate(names):
            place[name] = (LEFT + round((SHIFT.get(layer, 0) + i) * (BOX_W + GAP)), y)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">',
           '<title>The layers of petri/ and the imports between its packages (made by experiments/docs_layout.py)</title>',
           '<defs>']
    importers = sorted({a for a, _ in package_imports()})
    colour = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(importers)}
    for name in importers:
        out.append(f'<marker id="arrow-{name.split(".")[1].strip("_")}" viewBox="0 0 10 10" refX="9" refY="5" '
                   f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
                   f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{colour[name]}"/></marker>')
    out.append('</defs>')
    titles = layer_titles()
    for layer in sorted(rows, reverse=True):
        y = TOP + (top_layer - layer) * ROW_H
        out.append(f'<rect x="4" y="{y - 14}" width="{width - 8}" height="{BOX_H + 28}" rx="6" '
                   f'fill="{"#fbf4ec" if layer % 2 else "#f3f3f3"}"/>')
        out.append(f'<text x="14" y="{y + BOX_H / 2 - 2}" font-weight="bold">layer {layer}</text>')
        out.append(f'<text x="14" y="{y + BOX_H / 2 + 14}" fill="#555">{escape(titles.get(layer, ""))}</text>')
    for a, b in sorted(package_imports()):
        (xa, ya), (xb, yb) = place[a], place[b]
        marker = f'url(#arrow-{a.split(".")[1].strip("_")})'
        if layer_of[a] == layer_of[b]:  # same row: an arc over the boxes
            x1, x2, y0 = xa + BOX_W / 2, xb + BOX_W / 2, ya
            d = f"M {x1:.0f} {y0} C {x1:.0f} {y0 - 40}, {x2:.0f} {y0 - 40}, {x2:.0f} {y0}"
        else:
            x1, y1, x2, y2 = xa + BOX_W / 2, ya + BOX_H, xb + BOX_W / 2, yb
            mid = (y1 + y2) / 2
            d = f"M {x1:.0f} {y1} C {x1:.0f} {mid:.0f}, {x2:.0f} {mid:.0f}, {x2:.0f} {y2}"
        out.append(f'<path d="{d}" fill="none" stroke="{colour[a]}" stroke-width="1.4" '
                   f'stroke-opacity="0.75" marker-end="{marker}"><title>{a} imports {b}</title></path>')
    for name, (x, y) in sorted(place.items()):
        label = name.removeprefix("petri.") + ("/" if name != "petri.__main__" else ".py")
        out.append(f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="5" fill="#fff" '
                   f'stroke="{colour.get(name, "#777")}" stroke-width="2"/>')
        out.append(f'<text x="{x + BOX_W / 2:.0f}" y="{y + BOX_H / 2 + 5:.0f}" text-anchor="middle">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="replace the block in docs/architecture.md and the diagram")
    args = ap.parse_args(argv)
    block = layout_block()
    if not args.write:
        print(block)
        return
    text = PAGE.read_text(encoding="utf-8")
    old = page_block(text)
    if old is None:
        raise SystemExit(f"{PAGE.relative_to(REPO)} has no {BEGIN} ... {END} block")
    PAGE.write_text(text.replace(old, block), encoding="utf-8")
    DIAGRAM.parent.mkdir(parents=True, exist_ok=True)
    DIAGRAM.write_text(diagram_svg(), encoding="utf-8")


if __name__ == "__main__":
    main()
