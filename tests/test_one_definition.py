"""One definition of a flip and of anchor preservation, and every view reads it: the flip grid, the
live flip count of the UI, the UI's final flip map, the per-anchor table, the samples table and the
API's event summary, all on a hand-worked two-sample trajectory."""

from __future__ import annotations

import numpy as np
import pytest

from petri.app.service import PetriService
from petri.core.trajectory import AnchorSpan, SamplerSettings, Trajectory
from petri.engine.base import LiveStep
from petri.measure.metrics import flip_grid, step_flips
from petri.measure.tables import anchors_table, preservation_summary, samples_table
from petri.runs.store import RunStore
from petri.web.api.responses import event_summary
from petri.web.ui.dish_tab.dish import DishController
from petri.web.ui.views import LiveFlips

# sample 0 runs 3 steps, sample 1 stops after 2 (its step 2 is padding, -1)
ARGMAX = np.array([
    [[5, 7, 1, 9], [5, 8, 1, 9], [6, 8, 2, 9]],   # flips: t1 @1; t2 @0 and @2 (2 is its anchor)
    [[1, 2, 3, 4], [1, 3, 3, 4], [-1, -1, -1, -1]],  # flips: t1 @1; t2 is padding
], dtype=np.int32)
STEPS = np.array([3, 2], dtype=np.int32)
ANCHORS = [[AnchorSpan("order", 2, (2,))], [AnchorSpan("person", 0, (1,)), AnchorSpan("order", 3, (4,))]]
MASK = np.array([[False, False, True, False], [True, False, False, True]])
TEXTS = ["the order is here", "a person orders"]  # "order" is intact in sample 0 only ("orders")

#: (S, T, L) by hand: free positions only, never at step 0 or in padding
GRID = np.zeros((2, 3, 4), dtype=bool)
GRID[0, 1, 1] = GRID[0, 2, 0] = GRID[1, 1, 1] = True
#: agreement by hand: sample 0's anchor token 2 at position 2 in 1 of 3 steps; sample 1's in 2 of 2
AGREEMENT = [1 / 3, 1.0, 1.0]


def trajectory() -> Trajectory:
    return Trajectory(
        argmax=ARGMAX, entropy=np.zeros(ARGMAX.shape, dtype=np.float32), accepted=np.ones(ARGMAX.shape, dtype=bool),
        steps=STEPS, anchor_mask=MASK, final_ids=ARGMAX[[0, 1], [2, 1]].astype(np.int64), anchors=ANCHORS,
        final_texts=TEXTS, prompt="p", prompt_ids=np.array([1]), settings=SamplerSettings(max_denoising_steps=3),
        model_id="hand",
    )


def test_flip_grid_and_step_flips_by_hand():
    np.testing.assert_array_equal(flip_grid(ARGMAX, STEPS, MASK), GRID)
    unmasked = GRID.copy()
    unmasked[0, 2, 2] = True  # the anchor's own raw argmax changed
    np.testing.assert_array_equal(flip_grid(ARGMAX, STEPS), unmasked)
    np.testing.assert_array_equal(step_flips([1, 2, 3], [1, 5, 3]), [False, True, False])
    with pytest.raises(ValueError, match="same shape"):
        step_flips([1, 2], [1, 2, 3])


def test_live_flips_stream_ends_at_the_flip_grid():
    live = LiveFlips(MASK)
    finished = [[False, False], [False, True], [True, True]]  # sample 1 stops after step 1
    canvas = ARGMAX + 100  # any canvas: sample 0's rows are kept as they came
    accepted = ARGMAX % 2 == 0
    for t in range(3):
        live.add(LiveStep(t, ARGMAX[:, t], canvas[:, t], accepted[:, t], np.array(finished[t])))
    expected = np.array([[0, 0, 0, 0], [0, 2, 0, 0], [1, 0, 0, 0]])  # GRID summed over samples, by hand
    np.testing.assert_array_equal(live.counts(), expected)
    np.testing.assert_array_equal(live.token_ids(), ARGMAX[0])
    np.testing.assert_array_equal(live.canvas_ids(), canvas[0])
    np.testing.assert_array_equal(live.accepted_rows(), accepted[0])


def test_preservation_is_aggregated_once(tiny_lm, tmp_path):
    traj = trajectory()
    anchors = anchors_table(traj)
    assert list(zip(anchors["sample"], anchors["concept"], anchors["intact"])) == [
        (0, "order", True), (1, "person", True), (1, "order", False)]
    np.testing.assert_allclose(anchors["agreement"], AGREEMENT)
    summary = preservation_summary(anchors)
    assert summary["anchors_total"] == 3 and summary["anchors_intact"] == 2
    assert summary["intact_share"] == pytest.approx(2 / 3) and summary["mean_agreement"] == pytest.approx(7 / 9)
    empty = preservation_summary(anchors.iloc[:0])
    assert empty["anchors_total"] == 0 and np.isnan(empty["intact_share"]) and np.isnan(empty["mean_agreement"])

    samples = samples_table(traj)
    assert samples["anchors_intact"].tolist() == [1, 1] and samples["n_anchors"].tolist() == [1, 2]
    np.testing.assert_allclose(samples["mean_agreement"], [1 / 3, 1.0])

    out = event_summary(0, traj, None)
    assert (out.preservation.anchors, out.preservation.intact) == (3, 2)
    assert out.preservation.intact_share == pytest.approx(2 / 3)
    assert out.preservation.mean_agreement == pytest.approx(7 / 9)
    assert [(a.concept, a.start, a.intact) for a in out.samples[1].anchors] == [("person", 0, True), ("order", 3, False)]
    assert out.samples[0].flips == [1, 1, 0, 0]  # GRID[0] summed over steps

    heat = DishController(PetriService(tiny_lm, RunStore(tmp_path / "store"))).final_heatmap(traj)
    np.testing.assert_array_equal(np.asarray(heat.data[0].z, dtype=float), GRID.sum(axis=0))
