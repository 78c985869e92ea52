"""Tests for petri.stats.groups: effect size vs brute force, p-values vs scipy, CI, determinism, checks."""

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from petri.stats import groups as stats
from petri.stats.groups import (
    GroupComparison,
    cliffs_delta,
    compare_groups,
    compare_levels,
    event_level_values,
)


def brute_force_delta(a, b):
    """Reference Cliff's delta of b over a: loop over every pair, count b > a minus b < a."""
    greater = less = 0
    for x in a:
        for y in b:
            if y > x:
                greater += 1
            elif y < x:
                less += 1
    return (greater - less) / (len(a) * len(b))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


# ------------------------------------------------------------------ Cliff's delta


@pytest.mark.parametrize(
    "n_a,n_b,decimals", [(5, 7, None), (12, 12, 1), (40, 25, 0), (3, 50, None)]
)
def test_cliffs_delta_matches_brute_force(rng, n_a, n_b, decimals):
    a = rng.normal(0.0, 1.0, n_a)
    b = rng.normal(0.4, 1.0, n_b)
    if decimals is not None:  # force ties within and across groups
        a, b = np.round(a, decimals), np.round(b, decimals)
    assert cliffs_delta(a, b) == pytest.approx(brute_force_delta(a, b), abs=1e-12)


def test_cliffs_delta_hand_values():
    assert cliffs_delta([1, 2], [3, 4]) == 1.0  # b always larger
    assert cliffs_delta([3, 4], [1, 2]) == -1.0
    assert cliffs_delta([1, 2, 3], [1, 2, 3]) == 0.0
    # pairs (a,b): (1,1)=tie (1,3)=+ (2,1)=- (2,3)=+ -> (2 - 1) / 4
    assert cliffs_delta([1, 2], [1, 3]) == pytest.approx(0.25)


def test_cliffs_delta_rejects_empty_and_nan():
    with pytest.raises(ValueError):
        cliffs_delta([], [1.0])
    with pytest.raises(ValueError):
        cliffs_delta([1.0, np.nan], [1.0])


# ------------------------------------------------------------------ U and p against an explicit reference


def pair_count_u(a, b) -> float:
    """Reference ``U_a``: over every pair, 1 when the ``a`` value is larger, 1/2 when tied."""
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def midranks(values) -> list[float]:
    """1-based ranks of ``values``, tied values sharing the mean of their ranks (plain loops)."""
    order = sorted(values)
    return [sum(i + 1 for i, w in enumerate(order) if w == v) / order.count(v) for v in values]


def null_u(a, b) -> np.ndarray:
    """``U_a`` of every one of the C(n_a + n_b, n_a) ways to split the pooled values into groups of
    n_a and n_b (all permutations under the null), from midranks: ``U_a = R_a - n_a (n_a + 1) / 2``."""
    pooled = list(a) + list(b)
    ranks = np.array(midranks(pooled))
    splits = np.array(list(itertools.combinations(range(len(pooled)), len(a))))
    return ranks[splits].sum(axis=1) - len(a) * (len(a) + 1) / 2


def enumerated_p(a, b, alternative: str) -> float:
    """Exact permutation p of ``U_a``: ``greater`` P(U >= u), ``less`` P(U <= u), two-sided twice
    the smaller tail (at most 1)."""
    u, null = pair_count_u(a, b), null_u(a, b)
    greater, less = np.mean(null >= u - 1e-9), np.mean(null <= u + 1e-9)
    return {"greater": greater, "less": less, "two-sided": min(1.0, 2 * min(greater, less))}[alternative]


def test_reference_hand_values():
    # a = [1, 2], b = [1, 3]: pairs (1,1) tie, (1,3) <, (2,1) >, (2,3) < -> U_a = 1.5
    assert pair_count_u([1, 2], [1, 3]) == 1.5
    assert midranks([5, 1, 5, 2]) == [3.5, 1.0, 3.5, 2.0]
    # a = [3, 4], b = [1, 2]: U_a over the 6 splits of {1,2,3,4} is 0,1,2,2,3,4; observed 4 -> 1/6
    assert sorted(null_u([3, 4], [1, 2])) == [0, 1, 2, 2, 3, 4]
    assert enumerated_p([3, 4], [1, 2], "greater") == pytest.approx(1 / 6)
    assert enumerated_p([3, 4], [1, 2], "two-sided") == pytest.approx(2 / 6)


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_exact_when_small_without_ties(rng, alternative):
    a = rng.normal(1.16, 0.2, 6)
    b = rng.normal(1.47, 0.2, 7)
    c = compare_groups(a, b, unit="event", alternative=alternative)
    assert c.p_method == "exact"
    assert c.u_statistic == pair_count_u(a, b)
    assert c.p_value == pytest.approx(enumerated_p(a, b, alternative), rel=1e-9)  # all C(13, 6) = 1716 splits
    assert c.alternative == alternative


def test_permutation_when_small_with_ties(rng):
    a = np.round(rng.normal(1.0, 0.3, 10), 1)
    b = np.round(rng.normal(1.15, 0.3, 11), 1)
    assert np.unique(np.concatenate([a, b])).size < 21  # there are ties
    c = compare_groups(a, b, unit="event", seed=7, n_permutations=4999)
    assert c.p_method == "permutation"
    assert c.n_permutations == 4999
    assert c.u_statistic == pair_count_u(a, b)
    # 4999 sampled permutations against all C(21, 10) = 352,716 of them: within 4 standard errors
    exact = enumerated_p(a, b, "two-sided")
    assert 0.005 < exact < 0.9  # a p-value where sampling error is visible
    assert abs(c.p_value - exact) <= 4 * math.sqrt(exact * (1 - exact) / 4999) + 1 / 5000, (c.p_value, exact)
    # agrees roughly with the tie-corrected normal approximation
    asym = sps.mannwhitneyu(a, b, method="asymptotic").pvalue
    assert abs(c.p_value - asym) < 0.05


def test_permutation_enumerates_all_when_few(rng):
    # C(8, 4) = 70 arrangements <= n_resamples: every one is counted, so the p-value is exact.
    a = [1.0, 2.0, 2.0, 3.0]
    b = [2.0, 4.0, 5.0, 6.0]
    c = compare_groups(a, b, unit="event")
    assert c.p_method == "permutation"
    assert c.u_statistic == 2.0  # 1 < all of b; each 2 ties one 2 (1/2 + 1/2); 3 > 2 (1)
    assert c.p_value == pytest.approx(enumerated_p(a, b, "two-sided"))


def test_asymptotic_when_large(rng):
    a = np.round(rng.normal(0.0, 1.0, 60), 1)
    b = np.round(rng.normal(0.5, 1.0, 80), 1)
    c = compare_groups(a, b, unit="segment")
    ref = sps.mannwhitneyu(a, b, method="asymptotic")
    assert c.p_method == "asymptotic"
    assert c.u_statistic == ref.statistic
    assert c.p_value == pytest.approx(ref.pvalue, rel=1e-12)


def test_rank_biserial_identity_with_cliffs_delta(rng):
    for n_a, n_b, dec in [(6, 9, None), (12, 12, 1), (50, 70, 0)]:
        a, b = rng.normal(0, 1, n_a), rng.normal(0.3, 1, n_b)
        if dec is not None:
            a, b = np.round(a, dec), np.round(b, dec)
        c = compare_groups(a, b, unit="event", n_bootstrap=200)
        u_a = sps.mannwhitneyu(a, b).statistic
        assert c.rank_biserial == pytest.approx(1 - 2 * u_a / (n_a * n_b), abs=1e-12)
        assert c.rank_biserial == pytest.approx(c.cliffs_delta, abs=1e-12)
        assert c.cliffs_delta == pytest.approx(brute_force_delta(a, b), abs=1e-12)


def test_sign_convention_positive_when_b_larger():
    c = compare_groups([1.0, 1.1, 1.2, 1.3], [2.0, 2.1, 2.2, 2.3], unit="event")
    assert c.rank_biserial == 1.0 and c.cliffs_delta == 1.0
    assert c.median_b > c.median_a
    c2 = compare_groups([2.0, 2.1, 2.2, 2.3], [1.0, 1.1, 1.2, 1.3], unit="event")
    assert c2.rank_biserial == -1.0


def test_descriptives(rng):
    a, b = rng.normal(0, 1, 9), rng.normal(1, 1, 14)
    c = compare_groups(a, b, unit="event", labels=("benign", "control"))
    assert (c.n_a, c.n_b) == (9, 14)
    assert (c.group_a, c.group_b) == ("benign", "control")
    assert c.median_a == pytest.approx(np.median(a)) and c.median_b == pytest.approx(np.median(b))
    assert c.mean_a == pytest.approx(np.mean(a)) and c.mean_b == pytest.approx(np.mean(b))


# ------------------------------------------------------------------ bootstrap CI


@pytest.mark.parametrize("n_a,n_b", [(12, 12), (30, 45), (300, 200)])
def test_ci_contains_point_estimate(rng, n_a, n_b):
    a, b = rng.normal(0, 1, n_a), rng.normal(0.5, 1, n_b)
    c = compare_groups(a, b, unit="event", n_bootstrap=1000)
    assert -1.0 <= c.ci_low <= c.cliffs_delta <= c.ci_high <= 1.0
    assert c.ci_low < c.ci_high
    assert c.ci_method == "BCa"
    assert c.n_bootstrap == 1000 and c.confidence == 0.95


def test_ci_wider_at_higher_confidence(rng):
    a, b = rng.normal(0, 1, 20), rng.normal(0.5, 1, 20)
    c90 = compare_groups(a, b, unit="event", confidence=0.90)
    c99 = compare_groups(a, b, unit="event", confidence=0.99)
    assert c99.ci_low <= c90.ci_low and c99.ci_high >= c90.ci_high


def test_ci_falls_back_to_percentile_when_bca_undefined():
    # complete separation: every resample has delta = 1, BCa is undefined
    c = compare_groups([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], unit="event")
    assert c.ci_method == "percentile"
    assert c.ci_low == c.ci_high == 1.0


def test_percentile_above_bca_limit(monkeypatch, rng):
    monkeypatch.setattr(stats, "BCA_MAX_N", 10)
    c = compare_groups(rng.normal(0, 1, 8), rng.normal(1, 1, 8), unit="event", n_bootstrap=500)
    assert c.ci_method == "percentile"
    assert c.ci_low <= c.cliffs_delta <= c.ci_high


# ------------------------------------------------------------------ determinism


def test_deterministic_given_seed(rng):
    a = np.round(rng.normal(1.0, 0.3, 12), 1)  # ties -> permutation p-value, seeded
    b = np.round(rng.normal(1.3, 0.3, 12), 1)
    c1 = compare_groups(a, b, unit="event", seed=3)
    c2 = compare_groups(list(a), list(b), unit="event", seed=3)
    assert c1 == c2
    c3 = compare_groups(a, b, unit="event", seed=4)
    assert (c3.ci_low, c3.ci_high, c3.p_value) != (c1.ci_low, c1.ci_high, c1.p_value)
    assert c3.cliffs_delta == c1.cliffs_delta and c3.u_statistic == c1.u_statistic


# ------------------------------------------------------------------ validation


def test_group_needs_two_values_named_in_error():
    with pytest.raises(ValueError, match="'benign'"):
        compare_groups([1.0], [1.0, 2.0, 3.0], unit="event")
    with pytest.raises(ValueError, match="'contradictory'"):
        compare_groups([1.0, 2.0], [], unit="event")
    with pytest.raises(ValueError, match="'ctl'.*after dropping 2 NaN"):
        compare_groups([1.0, 2.0], [np.nan, 3.0, np.nan], unit="event", labels=("x", "ctl"))


def test_nan_dropped_and_counted():
    c = compare_groups([1.0, np.nan, 2.0, 3.0], [4.0, 5.0, np.nan, np.nan, 6.0], unit="sample")
    ref = compare_groups([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], unit="sample")
    assert (c.n_a, c.n_b, c.n_nan_a, c.n_nan_b) == (3, 3, 1, 2)
    assert c.p_value == ref.p_value and c.u_statistic == ref.u_statistic
    assert "NaN dropped: 1 benign, 2 contradictory" in c.summary()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"unit": "participant"}, "unit"),
        ({"unit": "event", "alternative": "bigger"}, "alternative"),
        ({"unit": "event", "confidence": 1.5}, "confidence"),
        ({"unit": "event", "n_bootstrap": 0}, "n_bootstrap"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare_groups([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], **kwargs)


def test_infinite_and_non_numeric_rejected():
    with pytest.raises(ValueError, match="infinite"):
        compare_groups([1.0, np.inf, 2.0], [1.0, 2.0], unit="event")
    with pytest.raises(ValueError, match="not numeric"):
        compare_groups(["a", "b"], [1.0, 2.0], unit="event")


# ------------------------------------------------------------------ result object


def test_summary_and_to_dict(rng):
    c = compare_groups(rng.normal(0, 1, 12), rng.normal(1, 1, 12), unit="event")
    s = c.summary()
    assert "\n" not in s
    for part in ("event level", "benign n=12", "contradictory n=12", "Mann-Whitney", "exact",
                 "rank-biserial", "95% CI"):
        assert part in s
    assert "non-independent" not in s
    d = c.to_dict()
    json.dumps(d)  # serialisable
    assert d["p_value"] == c.p_value and d["independent"] is True and d["summary"] == s
    assert isinstance(c, GroupComparison)
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError is one
        c.p_value = 0.5  # frozen


# ------------------------------------------------------------------ units of analysis


def _segments(rng, n_events=6, n_samples=4, n_segments=3):
    rows = []
    for group, mu in (("benign", 1.1), ("contradictory", 1.5), ("control", 1.2)):
        for e in range(n_events):
            for s in range(n_samples):
                for k in range(n_segments):
                    rows.append(
                        {"event": f"{group}-{e}", "group": group, "sample": s, "pair": k,
                         "instability": rng.normal(mu, 0.3)}
                    )
    return pd.DataFrame(rows)


def test_event_level_values_means_per_event(rng):
    df = _segments(rng)
    ev = event_level_values(df)
    assert list(ev.columns) == ["event", "group", "instability", "n_rows"]
    assert len(ev) == 18 and (ev["n_rows"] == 12).all()
    expected = df.groupby("event")["instability"].mean()
    got = ev.set_index("event")["instability"]
    pd.testing.assert_series_equal(got, expected, check_names=False)
    assert ev.set_index("event").loc["control-3", "group"] == "control"


def test_event_level_values_hand_example():
    df = pd.DataFrame(
        {"event": ["e1", "e1", "e2", "e2", "e2"], "group": ["b", "b", "c", "c", "c"],
         "instability": [1.0, 2.0, 3.0, np.nan, 5.0]}
    )
    ev = event_level_values(df).set_index("event")
    assert ev.loc["e1", "instability"] == 1.5
    assert ev.loc["e2", "instability"] == 4.0  # NaN segment skipped
    assert ev.loc["e2", "n_rows"] == 3


def test_event_level_values_validation():
    df = pd.DataFrame({"event": ["e1", "e1"], "group": ["b", "c"], "instability": [1.0, 2.0]})
    with pytest.raises(ValueError, match="more than one"):
        event_level_values(df)
    with pytest.raises(ValueError, match="missing column"):
        event_level_values(df, value="flips")


def test_compare_levels(rng):
    df = _segments(rng)
    res = compare_levels(df, groups=("benign", "contradictory"), seed=1, n_bootstrap=500)
    ev, seg = res
    assert ev.unit == "event" and ev.independent
    assert seg.unit == "segment" and not seg.independent
    assert (ev.n_a, ev.n_b) == (6, 6)
    assert (seg.n_a, seg.n_b) == (72, 72)
    assert "segment level (non-independent)" in seg.summary()
    assert seg.summary().startswith("segment level (non-independent)")
    events = event_level_values(df)
    direct = compare_groups(
        events.loc[events.group == "benign", "instability"],
        events.loc[events.group == "contradictory", "instability"],
        unit="event", seed=1, n_bootstrap=500,
    )
    assert ev == direct
    json.dumps(res.to_dict())


def test_compare_levels_unknown_group(rng):
    with pytest.raises(ValueError, match="'contradicting'"):
        compare_levels(_segments(rng), groups=("benign", "contradicting"))


def test_module_does_not_import_torch():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(stats))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    assert "torch" not in names
