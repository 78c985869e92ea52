"""How the project writes a count in words: ``counted(1, "template")`` is "1 template",
``counted(2, "template")`` "2 templates" (every tab of the UI, the study report and the power summary
use it, so none writes "1 templates")."""

from __future__ import annotations

__all__ = ["counted", "plural"]

#: Nouns whose plural is not the singular + "s".
IRREGULAR = {"batch": "batches", "analysis": "analyses", "matrix": "matrices", "index": "indices"}


def plural(noun: str) -> str:
    """The plural of ``noun`` (its last word): "template" → "templates", "batch" → "batches"."""
    head, _, last = noun.rpartition(" ")
    many = IRREGULAR.get(last, last + "s")
    return f"{head} {many}" if head else many


def counted(n: int | float, noun: str, many: str | None = None) -> str:
    """``n`` and ``noun``, singular for exactly 1, else plural (``many``, or :func:`plural`)."""
    word = noun if n == 1 else (many or plural(noun))
    return f"{n} {word}"
