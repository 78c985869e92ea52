"""A Space variant's README: README.md with the variant's keys (``assets/space/<variant>.yaml``) merged
over its front matter, the rest of the file unchanged.

    python experiments/space_variant.py zerogpu                    # print it
    python experiments/space_variant.py zerogpu --write README.md  # in the Space's checkout, before the push

Variants: ``zerogpu`` (the real model on ZeroGPU; docs/deploy.md#zerogpu).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
VARIANTS = REPO / "assets" / "space"


def split_front_matter(text: str) -> tuple[dict, str]:
    """(front matter, body) of a README that starts with a ``---`` block."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise ValueError("README.md does not start with a --- front matter block")
    end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    return yaml.safe_load("".join(lines[1:end])) or {}, "".join(lines[end + 1:])


def variant_keys(variant: str) -> dict:
    """The keys of ``assets/space/<variant>.yaml``."""
    path = VARIANTS / f"{variant}.yaml"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in VARIANTS.glob("*.yaml")))
        raise ValueError(f"variant: no {path.name} (variants: {names})")
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def variant_readme(variant: str, readme: str) -> str:
    """``readme`` with the variant's keys merged over its front matter (the variant's value wins)."""
    front, body = split_front_matter(readme)
    merged = {**front, **variant_keys(variant)}
    return "---\n" + yaml.safe_dump(merged, sort_keys=False, allow_unicode=True, width=1000) + "---\n" + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", help="a file name of assets/space/ without .yaml (zerogpu)")
    parser.add_argument("--write", type=Path, help="write the README here instead of printing it")
    args = parser.parse_args(argv)
    text = variant_readme(args.variant, (REPO / "README.md").read_text(encoding="utf-8"))
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
