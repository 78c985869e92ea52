"""The Validity page's numbers: the ladder's statistics (experiments/validity_stats.py) on hand-worked
cases, and the teacher's reads (experiments/teacher_reference.py) against the tiny stand-in's own
logits, one unpadded question at a time."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from experiment_support import experiment_script

stats_script = experiment_script("validity_stats")
teacher_reference = experiment_script("teacher_reference")
teacher_corpus = experiment_script("teacher_corpus")


def test_group_test_auc_and_direction():
    # every contradictory event above every benign one: AUC 1; exact two-sided p = 2 / C(6, 3) = 0.1
    res = stats_script.group_test(np.array([5.0, 6.0, 7.0]), np.array([1.0, 2.0, 3.0]))
    assert res["auc"] == 1.0
    assert res["p"] == pytest.approx(0.1)
    # one of nine pairs the other way round
    assert stats_script.group_test(np.array([2.5, 6.0, 7.0]), np.array([1.0, 2.0, 3.0]))["auc"] == pytest.approx(8 / 9)


def test_paired_test_by_hand():
    before = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    after = before + np.array([1.0, 2.0, -0.5, 3.0, 4.0])
    res = stats_script.paired_test(after, before)
    d = np.array([1.0, 2.0, -0.5, 3.0, 4.0])
    assert res["mean"] == pytest.approx(1.9)
    half = 2.7764451051977987 * d.std(ddof=1) / math.sqrt(5)  # t(0.975, 4)
    assert res["ci95"] == pytest.approx([1.9 - half, 1.9 + half])
    # ranks of |d|: 0.5 -> 1, 1 -> 2, 2 -> 3, 3 -> 4, 4 -> 5; positive sum 14, negative 1
    assert res["rank_biserial"] == pytest.approx(13 / 15)
    # exact two-sided signed-rank p: W- = 1 among 2^5 sign patterns: {W- = 0, 1} twice = 4 / 32
    assert res["wilcoxon_p"] == pytest.approx(4 / 32)
    assert res["share_up"] == pytest.approx(0.8)
    assert res["d_z"] == pytest.approx(1.9 / d.std(ddof=1))


def test_power_of_a_medium_paired_effect():
    # G*Power: paired t, d_z = 0.5, alpha 0.05 two-sided, power 0.8 -> 33.37 pairs (34 rounded up)
    assert stats_script._power_n(0.5, paired=True) == pytest.approx(33.37, abs=0.01)
    # independent groups, d = 0.5 -> 63.77 per group (64)
    assert stats_script._power_n(0.5, paired=False) == pytest.approx(63.77, abs=0.01)
    assert stats_script._power_n(0.0, paired=True) is None


def test_trend_slope_and_page():
    x = np.array([0.0, 0.25, 0.5, 1.0])
    table = np.array([[1.0, 1.5, 2.0, 3.0], [2.0, 2.0, 2.5, 2.6], [0.0, 1.0, 0.5, 2.0]])
    res = stats_script.trend(table, x)
    slopes = [np.polyfit(x, row, 1)[0] for row in table]
    assert res["slope"]["mean"] == pytest.approx(np.mean(slopes))
    # Page's L = sum over doses of (predicted rank) x (rank sum): rows ranked 1..4, 1.5 1.5 3 4, 1 3 2 4
    assert res["page_L"] == pytest.approx(1 * 3.5 + 2 * 6.5 + 3 * 8 + 4 * 12)


@pytest.fixture(scope="module")
def teacher(tiny_teacher):
    return teacher_corpus.load_teacher(tiny_teacher, torch.device("cpu"))


def test_p_no_of_a_padded_batch_equals_each_question_alone(teacher, monkeypatch):
    model, tok = teacher
    # the stand-in's tokenizer has no one-token Yes/No: single letters stand in for the spellings
    monkeypatch.setattr(teacher_reference, "SPELLINGS", {"yes": ("Y", "y"), "no": ("N", "n")})
    questions = ["a short one", "a much longer question about an event that goes on"]
    got = teacher_reference.p_no(model, tok, questions)
    for q, value in zip(questions, got):
        ids = torch.tensor([teacher_corpus.chat_ids(tok, q)])
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=ids).logits[0, -1].float(), -1)
        yes = sum(probs[tok.encode(s, add_special_tokens=False)[0]] for s in ("Y", "y"))
        no = sum(probs[tok.encode(s, add_special_tokens=False)[0]] for s in ("N", "n"))
        assert value == pytest.approx(float(no / (yes + no)), rel=1e-4)


def test_text_nll_equals_the_mean_over_the_texts_tokens(teacher):
    model, tok = teacher
    texts = ["the cat sat", "a longer text about the baker and the oven"]
    got = teacher_reference.text_nll(model, tok, texts)
    for text, value in zip(texts, got):
        ids = teacher_corpus.plain_ids(tok, text)
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        want = -np.mean([float(logp[i - 1, ids[i]]) for i in range(1, len(ids))])
        assert value == pytest.approx(want, rel=1e-4)
