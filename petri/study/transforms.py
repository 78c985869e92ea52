"""Prompt transforms a study condition may name (``conditions[].transform``): deterministic rewrites of
an event's text, seeded from the transform's name and the event id, so the same study file always
gives the same prompts (a transform never draws from the run's seed). No torch, no model.

Registered here, in :data:`TRANSFORMS` (name -> function ``(text, seed) -> text``):

- ``shuffle_words``: the event's whitespace-separated words in a seeded random order (punctuation
  stays attached to its word). When the shuffle happens to give the original order back and the
  words are not all equal, the words are rotated by one instead, so the text always changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

__all__ = ["TRANSFORMS", "transform_seed", "apply_transform", "shuffle_words"]


def shuffle_words(text: str, seed: int) -> str:
    """``text``'s words (split on whitespace) in the order of ``numpy.random.default_rng(seed).permutation``
    (rotated by one when that is the identity and the words differ), joined by single spaces."""
    words = text.split()
    order = np.random.default_rng(seed).permutation(len(words))
    shuffled = [words[i] for i in order]
    if shuffled == words and len(set(words)) > 1:
        shuffled = words[1:] + words[:1]
    return " ".join(shuffled)


TRANSFORMS: dict[str, Callable[[str, int], str]] = {"shuffle_words": shuffle_words}
"""Every prompt transform a study file may name."""


def transform_seed(name: str, event_id: str) -> int:
    """The seed of transform ``name`` on event ``event_id``: 31 bits of SHA-256 of both."""
    digest = hashlib.sha256(f"petri-transform/{name}/{event_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def apply_transform(name: str, text: str, event_id: str) -> str:
    """``text`` rewritten by the registered transform ``name`` (``KeyError`` naming it when unknown)."""
    if name not in TRANSFORMS:
        raise KeyError(f"unknown transform {name!r}; known: {sorted(TRANSFORMS)}")
    return TRANSFORMS[name](text, transform_seed(name, event_id))
