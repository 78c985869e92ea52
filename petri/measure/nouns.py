"""Template sensitivity: the nouns of generated texts, top-N per prompt template, Jaccard overlap.

Pure Python (never imports torch). One noun extractor per study language, chosen with
:func:`analyser_for`; every analyser installs from PyPI with its dictionary *inside* the package,
so nothing is downloaded at run time, and each is imported lazily (an English study never loads
the Korean or Japanese one).

**English** (``"pattern"``). The Pattern tagger (Brill-style lexicon + contextual rules, Penn
Treebank tags) that ships inside the ``textblob`` package (``textblob.en.tag``; its lexicon is part
of the wheel); not TextBlob's default NLTK tagger, which needs ``nltk_data``. Tags ``NN``, ``NNS``,
``NNP``, ``NNPS`` count; nouns are lowercased and plurals (``NNS`` / ``NNPS``) singularised with
Pattern's inflection rules (``units`` -> ``unit``); tokens shorter than 2 characters are dropped.
If ``textblob`` cannot be imported, an English study falls back to the labelled content-word
fallback below.

**Korean** (``"kiwi"``). The Kiwi morphological analyser (``kiwipiepy`` with its model package
``kiwipiepy-model``): morphemes tagged ``NNG`` (common noun) or ``NNP`` (proper noun) count, as
their surface form, particles and endings split off (``재고가`` -> ``재고``). Bound nouns (``NNB``:
counters such as ``개``, ``것``, ``수``) and numbers (``SN``) do not; a verbal noun that Kiwi splits
off its verb suffix counts (``확정되다`` -> ``확정`` NNG + ``되`` XSV).

**Japanese** (``"fugashi"``). MeCab through ``fugashi`` with the ``unidic-lite`` dictionary (loaded
explicitly, so a full ``unidic`` installed beside it changes nothing): words whose UniDic part of
speech is 名詞 with subclass 普通名詞 (common) or 固有名詞 (proper) count, as their surface form;
numerals (名詞-数詞), pronouns (代名詞) and suffixes such as the counter 個 (接尾辞) do not; a
suru-noun counts (``確定する`` -> ``確定`` 名詞-普通名詞-サ変可能).

For Korean and Japanese, one-character nouns count (``날``, ``日``); tokens need a letter.

**Content-word fallback** (``"content-words"``). Lowercased runs of letters minus an English
stopword list: *not* a noun extractor (verbs and adjectives pass) and, on Korean or Japanese, word-
or phrase-level (particles stay attached; Japanese has no spaces). Used only for English without
``textblob``, or when a study asks for it (``"nouns": "words"``); :func:`tagger_name` says so.

:func:`tagger_name` names the extractor in use with its package versions; record it with every
export.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from importlib import metadata, util

import numpy as np
import pandas as pd

__all__ = [
    "PATTERN",
    "KIWI",
    "FUGASHI",
    "FALLBACK",
    "ANALYSERS",
    "TAGGER_NAME",
    "UnsupportedLanguage",
    "language_code",
    "analyser_for",
    "analyser_problem",
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
KIWI = "kiwi"
"""Method name of the Korean analyser (kiwipiepy + kiwipiepy-model)."""
FUGASHI = "fugashi"
"""Method name of the Japanese analyser (fugashi/MeCab + unidic-lite)."""
FALLBACK = "content-words"
"""Method name of the fallback (stopword-filtered alphabetic tokens; not a POS tagger)."""

ANALYSERS: dict[str, str] = {"en": PATTERN, "ko": KIWI, "ja": FUGASHI}
"""Language code (ISO 639-1) -> the method that extracts its nouns."""
_LANGUAGE_NAMES = {"english": "en", "korean": "ko", "japanese": "ja"}
# method -> (importable module, pip distribution) pairs it needs
_PACKAGES = {
    KIWI: (("kiwipiepy", "kiwipiepy"), ("kiwipiepy_model", "kiwipiepy-model")),
    FUGASHI: (("fugashi", "fugashi"), ("unidic_lite", "unidic-lite")),
}
_EXTRA = {KIWI: "ko", FUGASHI: "ja"}
_KIWI_TAGS = frozenset({"NNG", "NNP"})
_UNIDIC_NOUNS = frozenset({"普通名詞", "固有名詞"})

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


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


@lru_cache(maxsize=1)
def _kiwi():
    """The Kiwi analyser (built once: ~2 s and a few hundred MB for its model)."""
    from kiwipiepy import Kiwi

    return Kiwi()


@lru_cache(maxsize=1)
def _fugashi():
    """A MeCab tagger on the unidic-lite dictionary, named explicitly (not whichever UniDic is found)."""
    import fugashi
    import unidic_lite

    dicdir = unidic_lite.DICDIR
    return fugashi.Tagger(f'-r "{dicdir}/mecabrc" -d "{dicdir}"')


_FUGASHI_LOCK = threading.Lock()  # a MeCab tagger is not documented as thread-safe


class UnsupportedLanguage(ValueError):
    """A study language with no noun analyser here."""


def language_code(language: str) -> str:
    """The lowercased primary subtag of a language tag (``"ko-KR"`` -> ``"ko"``); English names
    of the supported languages are accepted too (``"Korean"`` -> ``"ko"``)."""
    code = re.split(r"[-_]", language.strip().lower(), maxsplit=1)[0]
    return _LANGUAGE_NAMES.get(code, code)


def analyser_for(language: str, *, words: bool = False) -> str:
    """The noun-extraction method for a study written in ``language``.

    English -> ``"pattern"`` (or the labelled fallback when textblob is missing), Korean ->
    ``"kiwi"``, Japanese -> ``"fugashi"``; ``words=True`` asks for the labelled content-word
    fallback in any language. Any other language raises :class:`UnsupportedLanguage`.
    """
    if words:
        return FALLBACK
    code = language_code(language)
    if code not in ANALYSERS:
        raise UnsupportedLanguage(
            f"no noun analyser for language {language!r} (have: {', '.join(sorted(ANALYSERS))}); "
            'set "nouns": "words" in the study to use the labelled word-level fallback'
        )
    return _resolve(None) if code == "en" else ANALYSERS[code]


def analyser_problem(method: str) -> str | None:
    """Why ``method`` cannot run here (a package missing, with the command that installs it), or
    None when it can. Looks the packages up without importing them."""
    missing = [dist for module, dist in _PACKAGES.get(method, ()) if util.find_spec(module) is None]
    if not missing:
        return None
    return (
        f"the {method} noun analyser needs {' and '.join(missing)}: "
        f"pip install -r requirements.txt (or pip install 'concept-petri-dish[{_EXTRA[method]}]')"
    )


def _resolve(method: str | None) -> str:
    if method is None:
        return PATTERN if _pattern() is not None else FALLBACK
    if method == PATTERN:
        if _pattern() is None:
            raise RuntimeError("method='pattern' needs the textblob package (pip install textblob)")
        return PATTERN
    if method in (FALLBACK, KIWI, FUGASHI):
        problem = analyser_problem(method)
        if problem is not None:
            raise RuntimeError(problem)
        return method
    raise ValueError(f"method must be None, {PATTERN!r}, {KIWI!r}, {FUGASHI!r} or {FALLBACK!r}, got {method!r}")


def tagger_name(method: str | None = None) -> str:
    """Human-readable name of the noun extractor that ``method`` (default: best available) uses."""
    resolved = _resolve(method)
    if resolved == PATTERN:
        loaded = _pattern()
        assert loaded is not None  # _resolve picks PATTERN only where it loads
        version = loaded[2]
        return f"textblob {version} Pattern tagger (Penn Treebank NN/NNS/NNP/NNPS; English)"
    if resolved == KIWI:
        return (
            f"kiwipiepy {_version('kiwipiepy')} Kiwi analyser with kiwipiepy-model {_version('kiwipiepy-model')} "
            "(morphemes tagged NNG/NNP; Korean)"
        )
    if resolved == FUGASHI:
        return (
            f"fugashi {_version('fugashi')} MeCab with unidic-lite {_version('unidic-lite')} "
            "(UniDic 名詞-普通名詞/固有名詞; Japanese)"
        )
    return "content-word fallback (NO part-of-speech tagger: stopword-filtered alphabetic tokens, word-level)"


#: The tagger in use (:func:`tagger_name`), declared for readers and checkers: no value is bound here, so
#: :func:`__getattr__` computes it on first use.
TAGGER_NAME: str


def __getattr__(name: str) -> str:  # PEP 562: TAGGER_NAME is computed on first use
    if name == "TAGGER_NAME":
        return tagger_name()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _keep(token: str, min_len: int = 2) -> bool:
    return len(token) >= min_len and any(ch.isalpha() for ch in token)


def _korean_nouns(text: str) -> list[str]:
    return [t.form.lower() for t in _kiwi().tokenize(text) if t.tag in _KIWI_TAGS and _keep(t.form, 1)]


def _japanese_nouns(text: str) -> list[str]:
    with _FUGASHI_LOCK:
        words = [(w.surface, w.feature.pos1, w.feature.pos2) for w in _fugashi()(text)]
    return [s.lower() for s, pos1, pos2 in words if pos1 == "名詞" and pos2 in _UNIDIC_NOUNS and _keep(s, 1)]


def extract_nouns(text: str, *, method: str | None = None) -> list[str]:
    """Nouns of ``text`` in order of appearance, lowercased (see module doc).

    ``method``: ``None`` (English: the tagger if installed, else the fallback), ``"pattern"``
    (require the English tagger), ``"kiwi"`` (Korean), ``"fugashi"`` (Japanese) or
    ``"content-words"`` (force the fallback, which returns content words, not nouns).
    :func:`analyser_for` picks the method for a study language.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    resolved = _resolve(method)
    if resolved == KIWI:
        return _korean_nouns(text)
    if resolved == FUGASHI:
        return _japanese_nouns(text)
    if resolved == FALLBACK:
        words = (m.group(0).lower() for m in _WORD.finditer(text))
        return [w for w in words if _keep(w) and w not in _STOPWORDS]
    loaded = _pattern()
    assert loaded is not None  # _resolve picks PATTERN only where it loads
    tag, singularize, _ = loaded
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
