"""Three of issue 25's measurement scripts, the parts that run without a GPU: split_k_check.py's
slices (how many a shape gets and where they end, hand-worked), blas_workspace.py's comparison
of each workspace size's times with the default's, and stream_split_k.py's slices and step sums."""

from __future__ import annotations

import pytest

from experiment_support import experiment_script

split_k = experiment_script("split_k_check")
workspace = experiment_script("blas_workspace")
stream_split = experiment_script("stream_split_k")


def test_slices_per_shape():
    # one canvas of the full-size model: 2 × 22 output tiles of 128, 132 multiprocessors → 3 slices
    assert split_k.split_groups(256, 2816, 262_144, 132) == 3
    assert split_k.split_groups(3072, 2816, 262_144, 132) == 1  # 24 × 22 tiles fill the chip
    assert split_k.split_groups(256, 2816, 16_384, 132) == 2  # no slice under 8,192
    assert split_k.split_groups(256, 2816, 262_144 + 16, 132) == 1  # not a multiple of 128


def test_slice_ends_near_equal_multiples_of_128():
    # 262,144 = 2,048 steps of 128: 682, 683 and 683 steps
    assert split_k.slice_ends(262_144, 3) == [87_296, 174_720, 262_144]
    assert split_k.slice_ends(384, 2) == [128, 384]
    for depth, groups in ((1000, 2), (384, 4), (384, 0)):
        with pytest.raises(ValueError, match=f"cannot cut a reduction of {depth} into {groups} slices"):
            split_k.slice_ends(depth, groups)


def test_each_size_is_compared_with_the_first():
    def run(size, ms):
        return {"size_kib": size, "cases": [{"shape": "o", "rows": 256, "kind": "fp8", "ms": ms},
                                           {"shape": "q", "rows": 256, "kind": "fp8", "error": "x"}]}

    table = workspace.compare([run("default", 0.02), run("32768", 0.015)])
    assert table == [{"size_kib": "32768", "shape": "o", "rows": 256, "kind": "fp8", "ms": 0.015,
                      "default_ms": 0.02, "ratio": 0.75}]


def test_stream_slices_are_multiples_of_16_but_the_last():
    # 4,096 / 3 = 1,365.3 → 86 steps of 16 = 1,376
    assert stream_split.slice_bounds(4096, 3) == [(0, 1376), (1376, 2752), (2752, 4096)]
    assert stream_split.slice_bounds(2112, 4) == [(0, 528), (528, 1056), (1056, 1584), (1584, 2112)]
    assert stream_split.slice_bounds(100, 4) == [(0, 32), (32, 64), (64, 96), (96, 100)]
    assert stream_split.slice_bounds(48, 4) == [(0, 16), (16, 32), (32, 48)]  # fewer slices than asked


def test_stream_step_sums_leave_out_a_cut_not_measured_for_every_product():
    cases = [{"per_step": 25, "whole_ms": 0.010, "split_2": {"streams_ms": 0.008}, "split_3": {"failure": "x"}},
             {"per_step": 5, "whole_ms": 0.020, "split_2": {"streams_ms": 0.030}, "split_3": {"streams_ms": 0.025}}]
    # whole 25 × 0.010 + 5 × 0.020; two slices 25 × 0.008 + 5 × 0.030; best 25 × 0.008 + 5 × 0.020
    assert stream_split.step_totals(cases, (2, 3)) == {"whole": 0.35, "best": 0.3, "streams_2": 0.35}
