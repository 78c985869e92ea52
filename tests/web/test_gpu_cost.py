"""The ZeroGPU cost model (petri/web/gpu_cost.py): the estimate against hand-worked numbers, the
default coefficients against the measured rows they come from (read from the bench JSONs), the
re-fits, the quota a call asks for and the cap on samples and steps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from petri.web import gpu_cost
from petri.web.gpu_cost import (
    DEFAULT_COST,
    MEASURED_STEPS,
    CallWork,
    GpuCost,
    cap_work,
    duration_s,
    fit_cold_start,
    fit_steps,
    fits,
    quota_s,
    quota_share,
    sampling_s,
)

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"
#: step 0.1 s, 0.01 s a sample at canvas 256, 0.001 s a prompt token and sample; warm-up 2 s,
#: cold start 10 s, a card twice as slow, margin 1.5
HAND = GpuCost(step=0.1, sample_step=0.01, prompt_token_step=0.001, warm_up=2.0, cold_start=10.0, card=2.0,
               margin=1.5)
#: a call costs exactly samples x steps seconds (canvas 256, one event): what cap_work is worked with
PER_SAMPLE_STEP = GpuCost(step=0.0, sample_step=1.0, prompt_token_step=0.0, warm_up=0.0, cold_start=0.0, card=1.0,
                          margin=1.0)


def test_the_estimate_of_a_call_matches_a_hand_worked_one():
    work = CallWork(samples=4, steps=10, canvas=512, prompt_tokens=100, events=2)
    # a step: 0.1 + 0.01 * 4 * 512/256 + 0.001 * 4 * 100 = 0.1 + 0.08 + 0.4 = 0.58 s
    # sampling: 2 * (2 + 2 events * 10 steps * 0.58) = 2 * 13.6 = 27.2 s
    assert sampling_s(work, HAND) == pytest.approx(27.2)
    assert duration_s(work, HAND) == 56  # ceil(1.5 * (10 + 27.2)) = ceil(55.8)
    assert quota_s(56) == 84 and quota_s(56, "xlarge") == 112  # 56 * 1.5 on a large card, twice on an xlarge one


def test_the_default_coefficients_reproduce_the_measured_steps_they_come_from():
    for name, shape in (("bench_h200_b1_p1600.json", (1, 256, 1600)), ("bench_h200_b12_p200.json", (12, 256, 200))):
        bench = json.loads((RESULTS / name).read_text())
        assert (bench["batch"], bench["canvas_length"], bench["prompt_tokens"]) == shape
        assert bench["model"].startswith("diffusiongemma-26B") and bench["gpu"] == "NVIDIA H200"
        assert DEFAULT_COST.step_s(*shape) == pytest.approx(bench["petri_ms_per_step"] / 1000, rel=2e-4)
    warm = json.loads((RESULTS / "bench_h200_b12_p200.json").read_text())
    assert DEFAULT_COST.warm_up == pytest.approx(warm["warmup"]["petri_s"] - warm["petri_median_s"], abs=1e-3)
    # the prompt's share: 12 x 1,600 less 12 x 200 on generate, 25 steps (measured-facts.md): 1.08 s / 25
    assert DEFAULT_COST.step_s(12, 256, 1600) - DEFAULT_COST.step_s(12, 256, 200) == pytest.approx(1.08 / 25, rel=1e-3)
    assert fit_steps(MEASURED_STEPS).step == pytest.approx(DEFAULT_COST.step, rel=1e-4)


def test_fit_steps_recovers_the_coefficients_rows_were_made_with():
    rows = [(s, c, p, 0.05 + 0.02 * s * c / 256 + 3e-6 * s * p) for s, c, p in
            ((1, 256, 100), (4, 256, 900), (12, 512, 200), (8, 128, 1600), (2, 256, 50))]
    fitted = fit_steps(rows, HAND)
    assert (fitted.step, fitted.sample_step, fitted.prompt_token_step) == pytest.approx((0.05, 0.02, 3e-6), rel=1e-6)
    assert (fitted.cold_start, fitted.card, fitted.margin) == (10.0, 2.0, 1.5)  # the rest kept from the base
    with pytest.raises(ValueError, match="rows"):
        fit_steps(rows[:2])
    with pytest.raises(ValueError, match="rows"):  # three rows of one shape cannot separate the coefficients
        fit_steps([(4, 256, 100, 1.0)] * 3)


def test_fit_cold_start_takes_the_warm_call_and_the_warm_up_away():
    assert fit_cold_start(100.0, 40.0, HAND).cold_start == pytest.approx(100 - 40 - 2.0 * 2.0)
    with pytest.raises(ValueError, match="first_call_s"):
        fit_cold_start(10.0, 40.0)


def test_the_default_cost_is_looked_up_at_each_call(monkeypatch):
    work = CallWork(4, 10, 256, 0)
    monkeypatch.setattr(gpu_cost, "DEFAULT_COST", PER_SAMPLE_STEP)
    assert duration_s(work) == 40


@pytest.mark.parametrize(("asked", "capped"), [
    ((4, 20), (4, 20)),    # 80 s asks 120 s of quota: fits as it is
    ((12, 10), (8, 10)),   # 120 s (180 of quota): 8 samples x 10 steps = 80 s, 120 of quota
    ((4, 30), (2, 30)),    # 3 x 30 = 90 s asks 135 of quota; 2 x 30 = 60 s fits
    ((1, 100), (1, 80)),   # one sample too long: the steps come down to 80
])
def test_cap_work_lowers_samples_then_steps_to_one_calls_quota(asked, capped):
    work = CallWork(asked[0], asked[1], 256, 0)
    got = cap_work(work, PER_SAMPLE_STEP)
    assert (got.samples, got.steps) == capped
    assert fits(got, PER_SAMPLE_STEP) and math.isclose(quota_s(duration_s(got, PER_SAMPLE_STEP)), 1.5 * capped[0] * capped[1])


def test_a_call_that_cannot_fit_is_left_at_one_sample_and_one_step():
    heavy = GpuCost(cold_start=500.0)
    got = cap_work(CallWork(3, 5, 256, 10), heavy)
    assert (got.samples, got.steps) == (1, 1) and not fits(got, heavy)


def test_quota_share_names_each_daily_quota():
    assert quota_share(60) == ("50 % of an anonymous visitor's 120 s, 20 % of a free account's 300 s, "
                               "2 % of a PRO account's 2,400 s")


def test_the_cold_start_is_the_largest_placement_measured_on_the_device():
    import json
    from pathlib import Path

    result = json.loads((Path(__file__).resolve().parents[2] / "experiments/results/zerogpu_device_h100.json").read_text())
    placed = [p["place_s"] for rows in result["full"]["calls"].values() for call in rows for p in call.get("place", [])]
    assert len(placed) == 8 and DEFAULT_COST.cold_start == pytest.approx(max(placed), abs=0.05)
