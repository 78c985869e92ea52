"""The paired statistics of a within-event design, against hand-worked cases and independent references
(scipy's wilcoxon, a statsmodels MixedLM fitted here, Page's L enumerated by hand)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.regression.mixed_linear_model import MixedLM

from petri.stats.mixed import crossed_mixed_model, dose_mixed_model
from petri.stats.paired_power import paired_power
from petri.stats.within import hodges_lehmann, page_trend, paired_comparison, signed_rank_null, walsh_averages


def test_the_wilcoxon_test_equals_scipys_on_the_same_differences():
    rng = np.random.default_rng(3)
    a = rng.normal(size=12)
    b = a + rng.normal(0.4, 1.0, size=12)
    res = paired_comparison(a, b, labels=("fit", "unrelated"))
    ref = sps.wilcoxon(b - a, method="exact")
    assert res.wilcoxon.method == "exact"
    assert res.wilcoxon.statistic == pytest.approx(ref.statistic) and res.wilcoxon.p_value == pytest.approx(ref.pvalue)
    # with ties and zeros: zeros dropped (wilcox), normal approximation with tie correction
    d = np.array([0.0, 0.0, 1.0, 1.0, -2.0, 3.0, 3.0, 4.0, 5.0, -1.0])
    tied = paired_comparison(np.zeros(10), d)
    ref = sps.wilcoxon(d, zero_method="wilcox", method="asymptotic")
    assert tied.wilcoxon.method == "normal approximation" and tied.n_zero == 2
    assert tied.wilcoxon.p_value == pytest.approx(ref.pvalue) and tied.wilcoxon.statistic == pytest.approx(ref.statistic)


def test_hodges_lehmann_and_walsh_averages_by_hand():
    # d = 1, 2, 4: Walsh averages 1, 1.5, 2, 2.5, 3, 4 -> median 2.25
    assert walsh_averages(np.array([4.0, 1.0, 2.0])).tolist() == [1, 1.5, 2, 2.5, 3, 4]
    assert hodges_lehmann([4.0, 1.0, 2.0])[0] == 2.25
    # n = 3: T+ over the subsets of ranks {1, 2, 3}: sums 0 1 2 3 3 4 5 6
    assert (signed_rank_null(3) * 8).tolist() == [1, 1, 1, 2, 1, 1, 1]


def test_the_interval_uses_the_exact_signed_rank_critical_value():
    # n = 6: P(T+ <= 0) = 1/64 <= 0.025 < P(T+ <= 1) = 2/64: the interval is [min, max], confidence 62/64
    d6 = [0.3, -0.1, 0.8, 1.2, 0.5, 0.9]
    est, low, high, conf = hodges_lehmann(d6)
    assert (low, high) == (min(d6), max(d6)) and conf == pytest.approx(62 / 64)
    # n = 8: P(T+ <= 3) = 5/256 <= 0.025 < P(T+ <= 4) = 7/256 (the tabled critical value 3): k = 4
    d8 = [0.3, -0.1, 0.8, 1.2, 0.5, 0.9, -0.4, 2.0]
    walsh = sorted((d8[i] + d8[j]) / 2 for i in range(8) for j in range(i, 8))
    est, low, high, conf = hodges_lehmann(d8)
    assert len(walsh) == 36 and (low, high) == (walsh[3], walsh[32]) and conf == pytest.approx(1 - 10 / 256)
    assert est == pytest.approx((walsh[17] + walsh[18]) / 2)
    assert math.isnan(hodges_lehmann([1.0, 2.0, 3.0])[1])  # n = 3 cannot reach 95%


def test_rank_biserial_and_shares_by_hand():
    # d = 1, -2, 3, 4 (and one zero): ranks of |d| 1 2 3 4; T+ = 8, T- = 2; r = 6 / 10
    res = paired_comparison([0, 0, 0, 0, 0], [1, -2, 3, 4, 0])
    assert res.rank_biserial == pytest.approx(0.6)
    assert (res.n_b_higher, res.n_b_lower, res.n_zero, res.n_events) == (3, 1, 1, 5)
    assert res.share_b_higher == pytest.approx(3 / 5) and res.median_difference == 1


def test_pages_L_and_its_exact_p_by_enumeration():
    table = np.array([[1.0, 2.0, 3.0], [1.0, 3.0, 2.0], [2.0, 1.0, 3.0]])
    # column rank sums 4, 6, 8: L = 1*4 + 2*6 + 3*8 = 40
    res = page_trend(pd.DataFrame(table, columns=["d0", "d50", "d100"]))
    assert res.statistic == 40 and res.conditions == ("d0", "d50", "d100") and res.n_events == 3
    perms = list(itertools.permutations([1, 2, 3]))
    ls = [sum((j + 1) * sum(p[j] for p in rows) for j in range(3)) for rows in itertools.product(perms, repeat=3)]
    assert res.p_value == pytest.approx(sum(x >= 40 for x in ls) / len(ls))
    with pytest.raises(ValueError, match="at least 3 ordered conditions"):
        page_trend(table[:, :2])


def _cells(seed: int = 0, n_events: int = 10, n_templates: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    u, v = rng.normal(0, 0.3, n_events), rng.normal(0, 0.2, n_templates)
    rows = []
    for e in range(n_events):
        for t in range(n_templates):
            for cond, dose in (("a", 0.0), ("m", 0.5), ("b", 1.0)):
                rows.append({"event_id": f"e{e:02d}", "template_id": f"t{t}", "condition": cond, "dose": dose,
                             "instability": 1 + 0.4 * dose + u[e] + v[t] + rng.normal(0, 0.1)})
    return pd.DataFrame(rows)


def _direct_fit(data: pd.DataFrame, x: np.ndarray):
    data = data.assign(x=x)
    model = MixedLM.from_formula("instability ~ x", data=data, groups=np.ones(len(data)), re_formula="0",
                                 vc_formula={"event": "0 + C(event_id)", "template": "0 + C(template_id)"})
    return model.fit(reml=True)


def test_the_condition_mixed_model_equals_a_statsmodels_fit_made_here():
    cells = _cells()
    res = crossed_mixed_model(cells, ("a", "b"), group_col="condition")
    two = cells[cells.condition.isin(["a", "b"])]
    fit = _direct_fit(two, (two.condition == "b").to_numpy(float))
    assert res.effect == pytest.approx(fit.fe_params["x"], rel=1e-6)
    assert res.se == pytest.approx(fit.bse_fe["x"], rel=1e-5)
    assert res.n_events == 10 and res.n_templates == 3 and res.n_cells == 60


def test_the_dose_mixed_model_equals_a_statsmodels_fit_made_here():
    cells = _cells(seed=1)
    res = dose_mixed_model(cells)
    fit = _direct_fit(cells, cells.dose.to_numpy(float))
    assert res.effect == pytest.approx(fit.fe_params["x"], rel=1e-6)
    assert res.se == pytest.approx(fit.bse_fe["x"], rel=1e-5)
    assert "slope of instability per unit dose" in res.summary()
    assert 0.2 < res.effect < 0.6  # the slope built into the cells is 0.4


def test_paired_power_by_hand_and_against_scipy_per_study():
    # every pilot difference positive: every study of 12 rejects (smallest possible p ~0.002); 2 events never can
    res = paired_power([1.0, 2.0, 3.0], events=(2, 12), n_sims=200)
    assert [d["power"] for d in res.designs] == [0.0, 1.0] and res.smallest["n_events"] == 12
    # shifted to a mean of 0 (differences -1, 0, 1), power falls to a rejection rate near alpha
    null = paired_power([1.0, 2.0, 3.0], events=(12,), effect=0.0, n_sims=400)
    assert null.designs[0]["power"] < 0.15 and null.smallest is None
    # one design, recomputed here study by study with scipy on the same draws
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.0, 0.4, -0.2, 0.6])
    res = paired_power(d, events=(10,), n_sims=50, seed=4)
    draws = d[np.random.default_rng([4, 10]).integers(0, d.size, size=(50, 10))]
    expect = np.mean([sps.wilcoxon(row, zero_method="wilcox", method="asymptotic").pvalue < 0.05 for row in draws])
    assert res.designs[0]["power"] == pytest.approx(expect)
    with pytest.raises(ValueError, match="at least 2 pilot events"):
        paired_power([1.0])
