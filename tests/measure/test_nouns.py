"""Tests for petri.measure.nouns: the taggers (English, Korean, Japanese), top-N with deterministic ties, Jaccard, off-diagonal mean."""

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from petri.measure import nouns
from petri.measure.nouns import (
    FALLBACK,
    FUGASHI,
    KIWI,
    PATTERN,
    UnsupportedLanguage,
    analyser_for,
    analyser_problem,
    extract_nouns,
    jaccard,
    jaccard_matrix,
    mean_off_diagonal,
    tagger_name,
    template_jaccard,
    top_nouns,
)

REPO = Path(__file__).resolve().parents[2]

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


# ------------------------------------------------------------------ Korean and Japanese analysers
# Expected nouns are marked by hand (the morphological analysis a person gives); the analysers must
# agree. Korean counts NNG/NNP (common/proper nouns), Japanese UniDic 名詞-普通名詞/固有名詞.


def test_language_picks_the_analyser():
    assert analyser_for("en") == PATTERN and analyser_for("English") == PATTERN
    assert analyser_for("ko") == KIWI and analyser_for("ko-KR") == KIWI and analyser_for("Korean") == KIWI
    assert analyser_for("ja") == FUGASHI and analyser_for("ja_JP") == FUGASHI
    assert analyser_for("fr", words=True) == FALLBACK and analyser_for("ko", words=True) == FALLBACK
    with pytest.raises(UnsupportedLanguage, match=r"'fr'.*have: en, ja, ko.*\"nouns\": \"words\""):
        analyser_for("fr")


@pytest.mark.parametrize(
    "sentence, expected",
    [
        # the sentence: 재고(가) 90개(bound noun 개) 밖에 없는데 120개의 주문(이) 확정(되다);
        # the counter 개 is a bound noun (NNB), so it is not counted; 확정되다 = 확정 (NNG) + 되 (XSV)
        ("재고가 90개밖에 없는데 120개의 주문이 확정된다", ["재고", "주문", "확정"]),
        # 그날 = 그 (determiner) + 날 (noun, one syllable): counted
        ("고객이 주문을 넣었고 창고는 그날 오후에 포장을 마쳤다.", ["고객", "주문", "창고", "날", "오후", "포장"]),
        # plural suffix 들 and the verb suffix 하다 split off
        ("사람들이 주문했다", ["사람", "주문"]),
        ("", []),
    ],
)
def test_korean_nouns_hand_checked(sentence, expected):
    assert extract_nouns(sentence, method=KIWI) == expected


def test_korean_counters_are_excluded_by_their_tag():
    # what the analyser says about the counter and the numbers: 개 is NNB, 90/120 are SN
    tags = {(t.form, t.tag) for t in nouns._kiwi().tokenize("재고가 90개밖에 없는데 120개의 주문이 확정된다")}
    assert ("개", "NNB") in tags and ("90", "SN") in tags and ("120", "SN") in tags


@pytest.mark.parametrize(
    "sentence, expected",
    [
        # the sentence: numerals (名詞-数詞) and the counter 個 (接尾辞) are not counted;
        # 確定する = 確定 (名詞-普通名詞-サ変可能) + する
        ("在庫が90個しかないのに120個の注文が確定する", ["在庫", "注文", "確定"]),
        ("顧客が注文を入れ、倉庫はその日の午後に梱包を終えた。", ["顧客", "注文", "倉庫", "日", "午後", "梱包"]),
        # the pronoun 私 (代名詞) is not a noun here; the proper noun マリア is
        ("私はマリアの注文を確認した", ["マリア", "注文", "確認"]),
        ("", []),
    ],
)
def test_japanese_nouns_hand_checked(sentence, expected):
    assert extract_nouns(sentence, method=FUGASHI) == expected


# two templates share 2 of 5 nouns, the third shares none: J = 2/5, 0, 0; mean = 0.4 / 3
HAND_JACCARD = {("t1", "t2"): 0.4, ("t1", "t3"): 0.0, ("t2", "t3"): 0.0}


@pytest.mark.parametrize(
    "method, texts",
    [
        (KIWI, {
            "t1": ["고객이 주문을 넣었다.", "창고에 재고가 있다."],  # {고객, 주문, 창고, 재고}
            "t2": ["직원이 재고를 세었다.", "고객이 웃었다."],  # {직원, 재고, 고객}
            "t3": ["사람이 왔다."],  # {사람}
        }),
        (FUGASHI, {
            "t1": ["顧客が注文を入れた。", "倉庫に在庫がある。"],  # {顧客, 注文, 倉庫, 在庫}
            "t2": ["店員が在庫を数えた。", "顧客が笑った。"],  # {店員, 在庫, 顧客}
            "t3": ["人が来た。"],  # {人}
        }),
    ],
)
def test_template_jaccard_korean_and_japanese_by_hand(method, texts):
    m = template_jaccard(texts, n=20, method=method)
    for (a, b), value in HAND_JACCARD.items():
        assert m.loc[a, b] == pytest.approx(value) and m.loc[b, a] == pytest.approx(value), (a, b)
    assert mean_off_diagonal(m) == pytest.approx(0.4 / 3)


def test_analysers_are_named_with_their_versions():
    from importlib.metadata import version

    ko, ja = tagger_name(KIWI), tagger_name(FUGASHI)
    assert f"kiwipiepy {version('kiwipiepy')}" in ko and f"kiwipiepy-model {version('kiwipiepy-model')}" in ko
    assert f"fugashi {version('fugashi')}" in ja and f"unidic-lite {version('unidic-lite')}" in ja
    assert "word-level" in tagger_name(FALLBACK)


def test_missing_analyser_package_is_named(monkeypatch):
    real = nouns.util.find_spec
    monkeypatch.setattr(nouns.util, "find_spec", lambda name: None if name == "unidic_lite" else real(name))
    problem = analyser_problem(FUGASHI)
    assert "unidic-lite" in problem and "concept-petri-dish[ja]" in problem and "fugashi and" not in problem
    with pytest.raises(RuntimeError, match="unidic-lite"):
        extract_nouns("注文", method=FUGASHI)
    assert analyser_problem(KIWI) is None and analyser_problem(PATTERN) is None


def test_an_english_study_never_imports_the_korean_or_japanese_analysers():
    """In a fresh interpreter: load and analyse English text the way a study does; none of the
    Korean/Japanese packages is imported. Then a Korean extraction does import kiwipiepy (so the
    check can see an import when there is one)."""
    code = textwrap.dedent(
        """
        import sys
        from petri.measure.nouns import analyser_for, template_jaccard
        from petri.study.schema import load_study
        import petri.study.results.analysis, petri.study.results.report
        study = load_study("assets/studies/inventory_order.json")
        method = study.noun_method()
        template_jaccard({"a": ["The order shipped."], "b": ["The inventory grew."]}, method=method)
        heavy = ("kiwipiepy", "kiwipiepy_model", "fugashi", "unidic_lite")
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
        template_jaccard({"a": ["주문"], "b": ["재고"]}, method=analyser_for("ko"))
        print(sorted(m for m in heavy if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    english, korean = out.stdout.strip().splitlines()
    assert english == "[]"
    assert "'kiwipiepy'" in korean and "fugashi" not in korean
