"""The README's Layout block, made from the code: per folder of ``petri/``, its layer and the first
paragraph of its ``__init__`` docstring, then the modules it holds.

    python experiments/readme_layout.py            # print the block
    python experiments/readme_layout.py --write    # replace the block in README.md

``tests/test_readme_layout.py`` fails when the README's block differs from what this prints, so a
moved, added or removed module shows in the README's Layout section or the tests go red.
"""

from __future__ import annotations

import argparse
import ast
import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "petri"
README = REPO / "README.md"
BEGIN = "<!-- layout: made by experiments/readme_layout.py -->"
END = "<!-- /layout -->"
NAME_WIDTH = 20
WIDTH = 104
HEAD = "app.py              what a Space runs: petri.web.server.main (the same as `petri serve`)"
TAIL = [
    "assets/             the embedded models (petri-small, petri-tiny and their -mdm twins), the study files, the",
    "                    README's screenshot",
    "tests/              pytest, one folder per folder of petri/ (and reliability/, experiments/); markers by folder",
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


def layout_block() -> str:
    """The whole fenced block, between its two marker comments."""
    folders = sorted((p.parent for p in PACKAGE.glob("*/__init__.py")),
                     key=lambda f: (docstring_head(f)[0] or 0, f.name))
    lines = [HEAD, "petri/", "  __main__.py       `python -m petri`: petri.cli.main"]
    for folder in folders:
        lines += folder_lines(folder, 1)
    return "\n".join([BEGIN, "```", *lines, *TAIL, "```", END])


def readme_block(text: str) -> str | None:
    start, end = text.find(BEGIN), text.find(END)
    return text[start:end + len(END)] if start >= 0 and end > start else None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="replace the block in README.md")
    args = ap.parse_args(argv)
    block = layout_block()
    if not args.write:
        print(block)
        return
    text = README.read_text(encoding="utf-8")
    old = readme_block(text)
    if old is None:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} block")
    README.write_text(text.replace(old, block), encoding="utf-8")


if __name__ == "__main__":
    main()
