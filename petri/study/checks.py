"""The checks every part of a study file shares: :class:`StudyError` (file, entry, reason) and the
:class:`Checker` of keys, texts, ids and string lists. No torch, no model."""

from __future__ import annotations

import re
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
