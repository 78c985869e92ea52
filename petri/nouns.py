"""Template sensitivity: the nouns of generated texts, top-N per prompt template, Jaccard overlap.

Pure Python (never imports torch).

**Tagger.** Nouns come from a real part-of-speech tagger: the Pattern tagger (Brill-style
lexicon + contextual rules, Penn Treebank tags) that ships *inside* the ``textblob`` package
(``textblob.en.tag``; its lexicon ``textblob/en/en-lexicon.txt`` is part of the wheel), so it
installs from PyPI with ``pip install textblob`` and needs **no run-time download** (unlike
TextBlob's default NLTK tagger, which needs ``nltk_data``; it is not used here). It is an English
tagger: on other scripts (e.g. Korean) it tags unknown words as nouns, so every word counts.

If ``textblob`` cannot be imported, :func:`extract_nouns` falls back to a clearly labelled
**content-word fallback** — lowercased alphabetic tokens minus an English stopword list — which is
*not* a noun extractor (verbs and adjectives pass). :data:`TAGGER_NAME` / :func:`tagger_name` says
which one is in use; record it with every export.

**Output form.** Nouns are lowercased surface forms; tokens the tagger marks plural
(``NNS`` / ``NNPS``) are singularised with Pattern's English inflection rules (``units`` ->
``unit``), so singular and plural count as one noun. Tags ``NN``, ``NNS``, ``NNP``, ``NNPS`` count
(proper nouns included); tokens without a letter or shorter than 2 characters are dropped.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from importlib import metadata
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "PATTERN",
    "FALLBACK",
    "TAGGER_NAME",
    "tagger_name",
    "extract_nouns",
    "top_nouns",
    "top_nouns_by_template",
    "jaccard",
    "jaccard_matrix",
    "template_jaccard",
    "mean_off_diagonal",
]

PATTERN = "pattern"
"""Method name of the real tagger (Pattern tagger bundled in textblob)."""
FALLBACK = "content-words"
"""Method name of the fallback (stopword-filtered alphabetic tokens; not a POS tagger)."""

_NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
_PLURAL_TAGS = frozenset({"NNS", "NNPS"})
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")

# A small English stopword list (function words, auxiliaries, pronouns) for the fallback only.
_STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each either else
    few for from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just may me might more most must my myself neither no nor not now of
    off on once only or other ought our ours ourselves out over own same shall she should so some
    such than that the their theirs them themselves then there these they this those through to
    too under until up upon very was we were what when where which while who whom whose why will
    with would yet you your yours yourself yourselves s t d ll m re ve""".split()
)


@lru_cache(maxsize=1)
def _pattern() -> tuple[Callable, Callable, str] | None:
    """(tag, singularize, version) from textblob's bundled Pattern code, or None if unavailable."""
    try:
        from textblob.en import tag
        from textblob.en.inflect import singularize
    except Exception:  # ImportError, or a broken install
        return None
    try:
        version = metadata.version("textblob")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return tag, singularize, version


def _resolve(method: str | None) -> str:
    if method is None:
        return PATTERN if _pattern() is not None else FALLBACK
    if method == PATTERN:
        if _pattern() is None:
            raise RuntimeError("method='pattern' needs the textblob package (pip install textblob)")
        return PATTERN
    if method == FALLBACK:
        return FALLBACK
    raise ValueError(f"method must be None, {PATTERN!r} or {FALLBACK!r}, got {method!r}")


def tagger_name(method: str | None = None) -> str:
    """Human-readable name of the noun extractor that ``method`` (default: best available) uses."""
    if _resolve(method) == PATTERN:
        version = _pattern()[2]
        return f"textblob {version} Pattern tagger (Penn Treebank NN/NNS/NNP/NNPS; English)"
    return "content-word fallback (NO part-of-speech tagger: stopword-filtered alphabetic tokens)"


def __getattr__(name: str) -> str:  # PEP 562: TAGGER_NAME is computed on first use
    if name == "TAGGER_NAME":
        return tagger_name()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _keep(token: str) -> bool:
    return len(token) >= 2 and any(ch.isalpha() for ch in token)


def extract_nouns(text: str, *, method: str | None = None) -> list[str]:
    """Nouns of ``text`` in order of appearance, lowercased, plurals singularised (see module doc).

    ``method``: ``None`` (the tagger if installed, else the fallback), ``"pattern"`` (require the
    tagger) or ``"content-words"`` (force the fallback, which returns content words, not nouns).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if _resolve(method) == FALLBACK:
        words = (m.group(0).lower() for m in _WORD.finditer(text))
        return [w for w in words if _keep(w) and w not in _STOPWORDS]
    tag, singularize, _ = _pattern()
    out = []
    for token, pos in tag(text):
        if pos not in _NOUN_TAGS:
            continue
        word = token.lower()
        if pos in _PLURAL_TAGS:
            word = singularize(word)
        if _keep(word):
            out.append(word)
    return out


def top_nouns(texts: Iterable[str], n: int = 20, *, method: str | None = None) -> list[str]:
    """The ``n`` most frequent nouns over all ``texts`` (every occurrence counts).

    Sorted by descending count, ties broken alphabetically, so the cut at ``n`` is deterministic.
    Fewer than ``n`` are returned when there are fewer distinct nouns.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if isinstance(texts, str):
        raise TypeError("texts must be a collection of strings, not one string")
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(extract_nouns(text, method=method))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [noun for noun, _ in ranked[:n]]


def top_nouns_by_template(
    texts_by_template: Mapping[str, Sequence[str]], n: int = 20, *, method: str | None = None
) -> dict[str, list[str]]:
    """:func:`top_nouns` for each template, keeping the mapping's order."""
    return {name: top_nouns(texts, n, method=method) for name, texts in texts_by_template.items()}


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """``|A ∩ B| / |A ∪ B|`` of the two sets; NaN when both are empty (undefined)."""
    a, b = set(a), set(b)
    union = a | b
    return len(a & b) / len(union) if union else float("nan")


def jaccard_matrix(sets: Mapping[str, Iterable[str]]) -> pd.DataFrame:
    """Square symmetric Jaccard matrix; index and columns are the keys in the mapping's order."""
    names = list(sets)
    as_sets = [set(sets[k]) for k in names]
    values = [[jaccard(x, y) for y in as_sets] for x in as_sets]
    return pd.DataFrame(values, index=pd.Index(names), columns=pd.Index(names), dtype=float)


def template_jaccard(
    texts_by_template: Mapping[str, Sequence[str]], n: int = 20, *, method: str | None = None
) -> pd.DataFrame:
    """Jaccard matrix of the top-``n`` noun sets of each template's generated texts."""
    if len(texts_by_template) < 1:
        raise ValueError("texts_by_template is empty")
    return jaccard_matrix(top_nouns_by_template(texts_by_template, n, method=method))


def mean_off_diagonal(matrix: pd.DataFrame | np.ndarray) -> float:
    """Mean of the off-diagonal entries of a square matrix (NaN entries skipped).

    For a symmetric Jaccard matrix this is the mean over unordered template pairs. Needs at least
    2 x 2; returns NaN if every off-diagonal entry is NaN.
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 2:
        raise ValueError(f"need a square matrix of at least 2 x 2, got shape {m.shape}")
    off = m[~np.eye(m.shape[0], dtype=bool)]
    off = off[~np.isnan(off)]
    return float(off.mean()) if off.size else float("nan")
