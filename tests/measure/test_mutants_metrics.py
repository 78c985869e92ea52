"""Tests that kill mutants of petri/measure/metrics.py which survived tests/measure/test_metrics.py and
tests/measure/test_tables.py (experiments/mutation/REPORT.md lists them). Expected values are worked out
by hand in the comments."""

import math
import warnings

import numpy as np
import pytest

from petri.core.trajectory import AnchorSpan
from petri.measure.metrics import (
    Segment,
    anchor_concepts,
    flip_counts,
    pair_instability,
    sample_flip_counts,
    segment_instability,
    settled_share,
    step_sum,
)


def test_a_single_step_run_is_valid_and_has_no_flips():
    # steps = 1 is the smallest legal run: one argmax row, nothing to compare it with → 0 flips.
    np.testing.assert_array_equal(flip_counts(np.array([[[4, 5, 6]]]), np.array([1])), [[0, 0, 0]])
    np.testing.assert_array_equal(sample_flip_counts(np.array([[4, 5, 6]])), [0, 0, 0])


def test_anchor_concepts_rejects_an_anchor_past_the_canvas():
    # positions 3..4 on a 4-position canvas: position 4 does not exist
    with pytest.raises(ValueError, match="anchors"):
        anchor_concepts([[AnchorSpan("a", 3, (1, 2))]], 4)


FLIPS = np.array([[2, 1, 3, 0, 5]])  # one sample, L = 5; cumulative sums 2, 3, 6, 6, 11


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (1, 4, (1 + 3 + 0) / 3),  # flips before the segment (2 at position 0) must not count
        (0, 2, (2 + 1) / 2),  # a segment may start at the first canvas position
        (3, 5, (0 + 5) / 2),  # ... and end at the last one (end == L)
    ],
)
def test_segment_instability_over_any_stretch_of_the_canvas(start, end, expected):
    values = segment_instability(FLIPS, [Segment(0, "a", "b", start, end)])
    np.testing.assert_allclose(values, [expected])


def test_segment_instability_rejects_a_reversed_segment():
    with pytest.raises(ValueError, match="segs"):
        segment_instability(FLIPS, [Segment(0, "a", "b", 3, 2)])


def test_empty_segments_and_anchor_only_samples_give_nan_without_warnings():
    # NaN is the documented answer for an empty segment, a pair seen only in empty segments and a
    # sample without free positions; computing it must not emit RuntimeWarnings (0/0, mean of [])
    # into study logs.
    segs = [Segment(0, "b", "a", 2, 2)]
    argmax = np.array([[[1, 2], [1, 3]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = segment_instability(np.zeros((1, 4)), segs)
        pairs = pair_instability(segs, values)
        share = settled_share(argmax, np.array([2]), 1, np.ones((1, 2), bool))
    assert np.isnan(values).all() and math.isnan(pairs[("a", "b")]) and np.isnan(share).all()


def test_settled_share_defaults_to_the_last_three_steps():
    # One sample, 6 steps: position 0 goes 1,2,3,3,3,3 (last flip at t = 2), position 1 goes
    # 1,2,2,2,2,2 (last flip at t = 1). Settled over the last 3 steps: commit <= 6 - 1 - 3 = 2 →
    # both → 1.0. Over the last 4: commit <= 1 → only position 1 → 0.5.
    argmax = np.array([[[1, 1], [2, 2], [3, 2], [3, 2], [3, 2], [3, 2]]])
    steps = np.array([6])
    np.testing.assert_allclose(settled_share(argmax, steps), [1.0])
    np.testing.assert_allclose(settled_share(argmax, steps, last_k=4), [0.5])


@pytest.mark.parametrize("last_k", [True, 2.5])
def test_settled_share_rejects_a_bool_or_fractional_last_k(last_k):
    argmax = np.zeros((1, 4, 2), dtype=int)
    with pytest.raises(ValueError, match="last_k"):
        settled_share(argmax, np.array([4]), last_k=last_k)


def test_step_sum_is_float_for_integer_values():
    # 2 steps run of 3: 1 + 1 = 2 per position, returned as float as documented
    out = step_sum(np.ones((1, 3, 2), dtype=np.int64), np.array([2]))
    assert out.dtype.kind == "f"
    np.testing.assert_array_equal(out, [[2.0, 2.0]])
