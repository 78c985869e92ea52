"""The Concepts page's list of recorded arrays and its list of every metric are made from the code's
declarations (``experiments/docs_metrics.py``), so a metric or a recorded field registered, changed or
removed shows on the page or this fails."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "experiments"))

import docs_metrics  # noqa: E402

from petri.measure.level_metrics import LevelMetric, register_metric, unregister_metric  # noqa: E402


def test_the_pages_blocks_are_the_generated_ones():
    page = (REPO / "docs" / "concepts.md").read_text(encoding="utf-8")
    for name, make in docs_metrics.BLOCKS.items():
        block = docs_metrics.page_block(page, name)
        assert block is not None, f"docs/concepts.md has no {name} block"
        assert block == make(), "run: python experiments/docs_metrics.py --write"


def test_the_list_names_every_level_and_a_new_metric():
    block = docs_metrics.metrics_block()
    for row in ("| sample | `mean_flips_free` | `samples.csv`, `SampleOut` | float | flips per position |",
                "| segment | `instability` | `segments.csv`, `SegmentOut` | float |",
                "| pair | `n_segments` | `pairs.csv`, `PairOut` | int | segments |",
                "| event | `intact_share` | `preservation` (`PreservationOut`) | float | share |"):
        assert row in block, row
    register_metric(LevelMetric("toy", "pair", "a toy | with a bar", float, lambda s: [], unit="bars", api=False))
    try:
        assert "| pair | `toy` | `pairs.csv` | float | bars | a toy \\| with a bar |" in docs_metrics.metrics_block()
    finally:
        unregister_metric("pair", "toy")
    assert "`toy`" not in docs_metrics.metrics_block()


def test_the_recorded_table_shows_each_fields_dtype_shape_and_fill():
    block = docs_metrics.recorded_block()
    assert "| `entropy` | float32 | (S, T, L) |" in block and "(NaN past a sample's last step)" in block
    assert "| `steps` | int32 | (S,) |" in block and "| `prompt_ids` | int64 | (P,) |" in block
    assert "absent (`None`) in runs stored before it was recorded" in block.split("`canvas`")[1].split("\n")[0]
