"""Two of issue 25's measurement scripts, the parts that run without a GPU: split_k_check.py's
slices (how many a shape gets and where they end, hand-worked) and blas_workspace.py's comparison
of each workspace size's times with the default's."""

from __future__ import annotations

import pytest

from experiment_support import experiment_script

split_k = experiment_script("split_k_check")
workspace = experiment_script("blas_workspace")


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
