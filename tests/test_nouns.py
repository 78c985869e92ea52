"""Tests for petri.nouns: the tagger, top-N with deterministic ties, Jaccard, off-diagonal mean."""

import math

import numpy as np
import pandas as pd
import pytest

from petri import nouns
from petri.nouns import (
    FALLBACK,
    PATTERN,
    extract_nouns,
    jaccard,
    jaccard_matrix,
    mean_off_diagonal,
    tagger_name,
    template_jaccard,
    top_nouns,
)

# ------------------------------------------------------------------ the tagger


def test_real_tagger_is_in_use():
    # The study requires a real POS tagger; textblob (bundled Pattern tagger) must be installed.
    from importlib.metadata import version

    expected = f"textblob {version('textblob')} Pattern tagger (Penn Treebank NN/NNS/NNP/NNPS; English)"
    assert nouns.TAGGER_NAME == expected and tagger_name() == expected
    # and the default extractor is that tagger, not the content-word fallback: the verb "ordered"
    # and the adjective "late" are dropped and the plural is singularised
    assert extract_nouns("The manager ordered late shipments.") == ["manager", "shipment"]
    assert extract_nouns("The manager ordered late shipments.", method=FALLBACK) != ["manager", "shipment"]


def test_tagger_finds_nouns_not_verbs():
    found = extract_nouns("The warehouse manager ordered 120 units of inventory.", method=PATTERN)
    assert found == ["warehouse", "manager", "unit", "inventory"]
    assert "ordered" not in found and "120" not in found and "the" not in found


def test_tagger_singularises_plurals_and_lowercases():
    found = extract_nouns(
        "Only 90 units were in stock, but the Customer ordered 120 boxes.", method=PATTERN
    )
    assert found == ["unit", "stock", "customer", "box"]


def test_tagger_empty_and_nounless_text():
    assert extract_nouns("", method=PATTERN) == []
    assert extract_nouns("It was quickly done.", method=PATTERN) == []


def test_fallback_is_labelled_and_keeps_content_words():
    assert "fallback" in tagger_name(FALLBACK) and "NO part-of-speech" in tagger_name(FALLBACK)
    found = extract_nouns("The warehouse manager ordered 120 units of inventory.", method=FALLBACK)
    assert found == ["warehouse", "manager", "ordered", "units", "inventory"]


def test_fallback_used_when_textblob_missing(monkeypatch):
    monkeypatch.setattr(nouns, "_pattern", lambda: None)
    assert "fallback" in nouns.TAGGER_NAME
    assert extract_nouns("The order is late.") == ["order", "late"]
    with pytest.raises(RuntimeError, match="textblob"):
        extract_nouns("The order is late.", method=PATTERN)


def test_bad_method_and_input():
    with pytest.raises(ValueError, match="method"):
        extract_nouns("x", method="spacy")
    with pytest.raises(TypeError):
        extract_nouns(None)
    with pytest.raises(TypeError):
        top_nouns("a single string is not a list of texts")


# ------------------------------------------------------------------ top-N


def test_top_nouns_counts_occurrences_over_texts():
    texts = [
        "The order exceeded the inventory.",
        "The order was late; the customer called about the order.",
        "The inventory is low.",
    ]
    # order 3, inventory 2, customer 1
    assert top_nouns(texts, n=2) == ["order", "inventory"]
    assert top_nouns(texts, n=10) == ["order", "inventory", "customer"]


def test_top_nouns_ties_broken_alphabetically():
    texts = ["zebra apple mango", "mango apple zebra kiwi"]
    # fallback: apple 2, mango 2, zebra 2, kiwi 1 -> ties in alphabetical order, cut at n
    assert top_nouns(texts, n=2, method=FALLBACK) == ["apple", "mango"]
    assert top_nouns(list(reversed(texts)), n=3, method=FALLBACK) == ["apple", "mango", "zebra"]
    assert top_nouns(texts, n=4, method=FALLBACK) == ["apple", "mango", "zebra", "kiwi"]


def test_top_nouns_deterministic_with_tagger():
    texts = ["The supplier shipped boxes.", "A clerk counted the pallets.", "The truck left."]
    first = top_nouns(texts, n=3)
    assert first == top_nouns(list(reversed(texts)), n=3)
    assert first == ["box", "clerk", "pallet"]  # all count 1 -> alphabetical


def test_top_nouns_bad_n():
    with pytest.raises(ValueError):
        top_nouns(["x"], n=0)


# ------------------------------------------------------------------ Jaccard


def test_jaccard_hand_values():
    assert jaccard({"a", "b", "c"}, {"b", "c", "d"}) == 0.5  # 2 / 4
    assert jaccard(["a", "b"], ["a", "b"]) == 1.0
    assert jaccard(["a"], ["b"]) == 0.0
    assert jaccard(["a", "b", "c", "d"], ["a"]) == 0.25
    assert math.isnan(jaccard([], []))


def test_jaccard_matrix_hand_computed():
    sets = {"t1": ["a", "b", "c"], "t2": ["b", "c", "d"], "t3": ["a", "x"]}
    m = jaccard_matrix(sets)
    expected = pd.DataFrame(
        [[1.0, 0.5, 0.25], [0.5, 1.0, 0.0], [0.25, 0.0, 1.0]],
        index=["t1", "t2", "t3"],
        columns=["t1", "t2", "t3"],
    )
    pd.testing.assert_frame_equal(m, expected)
    # mean over the 6 off-diagonal entries = (0.5 + 0.25 + 0.0) * 2 / 6 = 0.25
    assert mean_off_diagonal(m) == pytest.approx(0.25)


def test_template_jaccard_from_texts():
    by_template = {
        "plain": ["order inventory person", "order inventory"],
        "formal": ["inventory person stock", "stock stock"],
        "story": ["dragon castle", "castle knight"],
    }
    m = template_jaccard(by_template, n=3, method=FALLBACK)
    assert list(m.index) == list(m.columns) == ["plain", "formal", "story"]
    # plain {inventory, order, person}; formal {stock, inventory, person};
    # story {castle, dragon, knight}
    assert m.loc["plain", "formal"] == pytest.approx(2 / 4)
    assert m.loc["plain", "story"] == 0.0
    assert m.loc["formal", "story"] == 0.0
    assert np.allclose(np.diag(m), 1.0)
    assert np.allclose(m.to_numpy(), m.to_numpy().T)
    assert mean_off_diagonal(m) == pytest.approx(0.5 / 3)


def test_template_jaccard_with_tagger():
    by_template = {
        "a": ["The warehouse manager ordered 120 units of inventory."],
        "b": ["The manager checked the inventory and the stock."],
    }
    m = template_jaccard(by_template, n=20)
    # a {warehouse, manager, unit, inventory}; b {manager, inventory, stock} -> 2 / 5
    assert m.loc["a", "b"] == pytest.approx(0.4)


def test_mean_off_diagonal_numpy_nan_and_shape():
    assert mean_off_diagonal(np.array([[1.0, 0.2], [0.4, 1.0]])) == pytest.approx(0.3)
    with_nan = np.array([[1.0, np.nan, 0.5], [np.nan, 1.0, 0.1], [0.5, 0.1, 1.0]])
    assert mean_off_diagonal(with_nan) == pytest.approx(0.3)
    assert math.isnan(mean_off_diagonal(np.array([[1.0, np.nan], [np.nan, 1.0]])))
    with pytest.raises(ValueError):
        mean_off_diagonal(np.ones((1, 1)))
    with pytest.raises(ValueError):
        mean_off_diagonal(np.ones((2, 3)))


def test_template_jaccard_empty():
    with pytest.raises(ValueError):
        template_jaccard({})
