"""Tests that kill mutants of petri/stats/groups.py which survived tests/stats/test_stats.py
(experiments/mutation/REPORT.md lists them). Expected values are worked out by hand in the
comments, or come from scipy's bootstrap driven by a brute-force Cliff's delta written here."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

import petri.stats.groups as stats_module
from petri.stats.groups import (
    _delta_along_last_axis,
    _fmt_p,
    cliffs_delta,
    compare_groups,
    compare_levels,
    unit_level_values,
)

# 6 and 7 values with ties, overlapping: BCa is defined
A = [1.0, 2.0, 2.0, 3.0, 5.0, 4.0]
B = [2.0, 4.0, 5.0, 6.0, 7.0, 3.5, 8.0]


@pytest.mark.parametrize(
    ("p", "text"),
    [
        (float("nan"), "nan"),
        (float("inf"), "nan"),
        (1.0, "1"),
        (0.05, "0.05"),
        (1e-3, "0.001"),  # the boundary is still written plainly
        (9.9e-4, "9.90e-04"),  # below it: scientific
    ],
)
def test_p_values_are_written_plainly_down_to_one_in_a_thousand(p, text):
    assert _fmt_p(p) == text


def test_summary_line_with_nan_in_one_group_only():
    # a = [1, 2, 3, 4, 5] (one NaN dropped), b = [6, ..., 10]: no ties, n < 20 → exact; every a below
    # every b → U_a = 0, r = 1 - 0 = +1; two-sided p = 2 * P(U = 0) = 2 / C(10, 5) = 2 / 252 = 0.00794.
    # Every bootstrap resample keeps the separation (delta = 1), BCa is undefined → percentile [+1, +1].
    c = compare_groups([1.0, 2.0, np.nan, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0], unit="event")
    assert c.summary() == (
        "event level: benign n=5 median 3 vs contradictory n=5 median 8; Mann-Whitney U=0, "
        "p=0.00794 (exact, two-sided); rank-biserial r=+1.00 [95% CI +1.00, +1.00]; "
        "NaN dropped: 1 benign, 0 contradictory"
    )


def test_small_groups_are_uninformative_not_a_result():
    # issue 20 item 10 / issue 23: 3 vs 3 (smallest exact two-sided p = 2 / C(6, 3) = 0.1) and 2 vs 2
    # used to print "r=+1.00 [95% CI +1.00, +1.00]" as a result.
    for a, b in (([1.0, 2.0, np.nan, 3.0], [4.0, 5.0, 6.0]), ([1.0, 2.0], [3.0, 4.0])):
        c = compare_groups(a, b, unit="event")
        text = c.summary()
        assert not c.informative and c.to_dict()["informative"] is False
        assert "UNINFORMATIVE" in text and "each group needs at least 5" in text
        assert "CI" not in text and "p=" not in text and "r=" not in text
    assert "NaN dropped: 1 benign, 0 contradictory" in compare_groups([1.0, 2.0, np.nan, 3.0], [4.0, 5.0, 6.0],
                                                                       unit="event").summary()
    assert compare_groups([1.0, 2, 3, 4, 5], [6.0, 7, 8, 9, 10], unit="event").informative


def _delta_brute_force(x, y, axis=-1):
    """Cliff's delta P(y > x) - P(y < x) over all pairs, along ``axis`` (leading axes broadcast)."""
    x, y = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
    return np.sign(y[..., None, :] - x[..., :, None]).mean(axis=(-2, -1))


def test_bootstrap_ci_uses_the_requested_resamples_confidence_and_seed():
    got = compare_groups(A, B, unit="event", n_bootstrap=300, confidence=0.8, seed=7)
    ref = sps.bootstrap(
        (np.array(A), np.array(B)),
        _delta_brute_force,
        n_resamples=300,
        vectorized=True,
        paired=False,
        confidence_level=0.8,
        method="BCa",
        rng=np.random.default_rng(7),
    ).confidence_interval
    assert got.ci_method == "BCa"
    np.testing.assert_allclose([got.ci_low, got.ci_high], [ref.low, ref.high], rtol=1e-12)


def test_bca_up_to_and_including_the_limit(monkeypatch):
    monkeypatch.setattr(stats_module, "BCA_MAX_N", len(A) + len(B))  # 13 values: still BCa
    assert compare_groups(A, B, unit="event", n_bootstrap=200).ci_method == "BCa"


def test_recorded_defaults():
    # ties (2.0 in both groups) and n < 20 → permutation p-value with the default 9999 resamples
    c = compare_groups(A, B, unit="event")
    assert (c.p_method, c.n_permutations, c.n_bootstrap, c.seed) == ("permutation", 9999, 2000, 0)


@pytest.mark.parametrize("confidence", [0.0, 1.0])
def test_confidence_must_lie_strictly_inside_zero_one(confidence):
    with pytest.raises(ValueError, match="confidence"):
        compare_groups(A, B, unit="event", confidence=confidence)


def test_one_bootstrap_resample_and_one_permutation_are_allowed():
    c = compare_groups(A, B, unit="event", n_bootstrap=1, n_permutations=1)
    assert (c.p_method, c.n_bootstrap, c.n_permutations) == ("permutation", 1, 1)


def test_unit_level_values_defaults_and_sorted_output():
    # units appear as e3, e1, e2; output is sorted by unit: e1 mean(1, 3) = 2, e2 = 4, e3 = 6
    df = pd.DataFrame(
        {"event": ["e3", "e1", "e2", "e1"], "group": ["c", "b", "b", "b"],
         "instability": [6.0, 1.0, 4.0, 3.0]}
    )
    out = unit_level_values(df, "event")
    assert out["event"].tolist() == ["e1", "e2", "e3"]
    assert out["group"].tolist() == ["b", "b", "c"]
    assert out["instability"].tolist() == [2.0, 4.0, 6.0]
    assert out["n_rows"].tolist() == [2, 1, 1]


def test_compare_levels_with_other_column_names_and_labels():
    # calm events: c1 (1, 3) → 2, c2 (2, 4) → 3, c3 (5) → 5; tense: t1 (6, 8) → 7, t2 (9) → 9,
    # t3 (10, 12) → 11; "other" is ignored. Event level: [2, 3, 5] vs [7, 9, 11]; segment level:
    # [1, 3, 2, 4, 5] vs [6, 8, 9, 10, 12]. Both completely separated, no ties → exact, U_a = 0,
    # two-sided p = 2 / C(6, 3) = 0.1 at the event level and 2 / C(10, 5) = 2 / 252 at the
    # segment level.
    rows = [
        ("c1", "calm", 1.0), ("c1", "calm", 3.0), ("c2", "calm", 2.0), ("c2", "calm", 4.0),
        ("c3", "calm", 5.0), ("t1", "tense", 6.0), ("t1", "tense", 8.0), ("t2", "tense", 9.0),
        ("t3", "tense", 10.0), ("t3", "tense", 12.0), ("o1", "other", 100.0),
    ]
    df = pd.DataFrame(rows, columns=["ev", "cond", "flips"])
    res = compare_levels(
        df, group_col="cond", groups=("calm", "tense"), value="flips", event_col="ev",
        n_bootstrap=50,
    )
    ev, seg = res.event, res.segment
    assert (ev.group_a, ev.group_b, seg.group_a, seg.group_b) == ("calm", "tense", "calm", "tense")
    assert (ev.n_a, ev.n_b, ev.median_a, ev.median_b) == (3, 3, 3.0, 9.0)
    assert (ev.mean_a, ev.mean_b) == pytest.approx((10 / 3, 9.0))
    assert (seg.n_a, seg.n_b, seg.median_a, seg.median_b, seg.mean_a, seg.mean_b) == (
        5, 5, 3.0, 9.0, 3.0, 9.0
    )
    assert ev.u_statistic == 0 and seg.u_statistic == 0
    assert ev.n_bootstrap == seg.n_bootstrap == 50  # the keywords reach both comparisons
    assert ev.p_value == pytest.approx(0.1) and seg.p_value == pytest.approx(2 / math.comb(10, 5))
    d = res.to_dict()
    assert sorted(d) == ["event", "segment"]
    assert (d["event"]["unit"], d["segment"]["unit"]) == ("event", "segment")


def test_a_missing_group_label_counts_as_a_second_label():
    # e1's rows say "b" and nothing: the unit's group is ambiguous, so it must not be averaged
    df = pd.DataFrame({"event": ["e1", "e1"], "group": ["b", None], "instability": [1.0, 2.0]})
    with pytest.raises(ValueError, match="more than one 'group' label: \\['e1'\\]"):
        unit_level_values(df, "event")


def test_exact_p_value_records_no_permutations():
    # no ties, n < 20 → exact; n_permutations is reported as 0 (none were drawn)
    c = compare_groups([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], unit="event", n_bootstrap=50)
    assert (c.p_method, c.n_permutations) == ("exact", 0)


def test_twenty_per_group_is_no_longer_small():
    # SMALL_N = 20: a smallest group of exactly 20 values gets the asymptotic p-value
    a, b = np.arange(20.0), np.arange(20.0) + 100.5
    assert compare_groups(a, b, unit="event", n_bootstrap=50).p_method == "asymptotic"


def test_cliffs_delta_of_single_values():
    # one pair: b = 2 > a = 1 → delta = 1; an empty sample is an error
    assert cliffs_delta([1.0], [2.0]) == 1.0
    assert cliffs_delta([3.0], [2.0]) == -1.0
    with pytest.raises(ValueError, match="non-empty"):
        cliffs_delta([1.0], [])


def test_delta_broadcasts_leading_axes_of_either_group():
    # a = [1, 3] against b rows [2] and [4]: 2 beats 1, loses to 3 → 0; 4 beats both → 1
    np.testing.assert_allclose(
        _delta_along_last_axis(np.array([1.0, 3.0]), np.array([[2.0], [4.0]])), [0.0, 1.0]
    )
    # a rows [1, 3] and [5, 7] against b = [4]: 4 beats 1 and 3 → 1; loses to 5 and 7 → -1
    np.testing.assert_allclose(
        _delta_along_last_axis(np.array([[1.0, 3.0], [5.0, 7.0]]), np.array([4.0])), [1.0, -1.0]
    )


def test_sampled_permutation_p_value_is_bounded_by_the_resamples():
    # ties (1, 2, 4, 5 twice) and n < 20 → permutation. C(10, 5) = 252 splits exceed the 9
    # resamples asked for, so scipy samples them, and p can be no smaller than 1 / (9 + 1) (the
    # observed split counts); enumerating all 252 splits would give 2 / 252 for this complete
    # separation.
    c = compare_groups(
        [1.0, 1.0, 2.0, 2.0, 3.0], [4.0, 4.0, 5.0, 5.0, 6.0], unit="event",
        n_permutations=9, n_bootstrap=50,
    )
    assert (c.p_method, c.n_permutations) == ("permutation", 9)
    assert c.p_value >= 1 / 10
