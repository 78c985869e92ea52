"""The checks every part of a study file shares: :class:`StudyError` (file, entry, reason) and the
:class:`Checker` of keys, texts, ids and string lists. No torch, no model."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class StudyError(ValueError):
    """A malformed study file: ``file``, ``entry`` (e.g. ``events[3] (id 'c04')``) and ``reason``."""

    def __init__(self, file: str, entry: str, reason: str):
        self.file = file
        self.entry = entry
        self.reason = reason
        super().__init__(f"{file}: {entry}: {reason}")


class Checker:
    """Small checks that raise :class:`StudyError` naming the file (``source``) and the entry."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, entry: str, reason: str) -> StudyError:
        return StudyError(self.source, entry, reason)

    def keys(self, obj: Any, entry: str, allowed: set[str], required: tuple[str, ...]) -> dict:
        if not isinstance(obj, dict):
            raise self.fail(entry, f"must be a JSON object, got {type(obj).__name__}")
        unknown = sorted(set(obj) - allowed)
        if unknown:
            raise self.fail(entry, f"unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        for key in required:
            if key not in obj:
                raise self.fail(entry, f"missing required key {key!r}")
        return obj

    def text(self, value: Any, entry: str, *, empty_ok: bool = False) -> str:
        if not isinstance(value, str):
            raise self.fail(entry, f"must be a string, got {type(value).__name__}")
        if not empty_ok and not value.strip():
            raise self.fail(entry, "is empty")
        return value

    def ident(self, value: Any, entry: str) -> str:
        self.text(value, entry)
        if not ID_PATTERN.match(value):
            raise self.fail(entry, f"{value!r} is not a valid id (letters, digits, '_', '.', '-'; at most 64 characters)")
        return value

    def string_list(self, value: Any, entry: str) -> list[str]:
        if not isinstance(value, list):
            raise self.fail(entry, f"must be a list of strings, got {type(value).__name__}")
        for i, item in enumerate(value):
            self.text(item, f"{entry}[{i}]")
        return value

    def concept_subset(self, value: Any, entry: str, concepts: list[str]) -> tuple[str, ...]:
        """``value`` as a subset of the study's ``concepts``: at least 2, none unknown, none twice."""
        sub = self.string_list(value, entry)
        unknown = [c for c in sub if c not in set(concepts)]
        if unknown:
            raise self.fail(entry, f"unknown concept {unknown[0]!r}; the study's concepts are {concepts}")
        dupes = [c for c, n in Counter(sub).items() if n > 1]
        if dupes:
            raise self.fail(entry, f"duplicate concept {dupes[0]!r}")
        if len(sub) < 2:
            raise self.fail(entry, f"at least 2 concepts are needed, got {len(sub)}")
        return tuple(sub)
