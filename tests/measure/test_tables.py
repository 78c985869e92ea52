"""Tidy tables of a hand-built Trajectory; expected values worked out in comments."""

import numpy as np
import pandas as pd
import pytest

from petri.core.trajectory import NO_TOKEN, AnchorSpan, SamplerSettings, Trajectory
from petri.measure.tables import pairs_table, positions_table, samples_table, segments_table

P = NO_TOKEN
T, F = True, False


def make_trajectory(event: str = "benign") -> Trajectory:
    # 2 samples, T = 3 steps at most, L = 6 positions.
    # sample 0 (3 steps): person@0, free 1-3, order@4-5 (anchors given out of canvas order)
    # sample 1 (2 steps): order@0-1, person@2 right after it (empty segment), free 3-5
    argmax = np.array(
        [
            [
                [50, 1, 2, 3, 70, 71],
                [51, 1, 4, 3, 70, 71],
                [50, 5, 4, 3, 70, 9],
            ],
            [
                [70, 71, 50, 7, 8, 9],
                [70, 71, 50, 7, 6, 9],
                [P, P, P, P, P, P],
            ],
        ],
        dtype=np.int32,
    )
    entropy = np.empty((2, 3, 6), dtype=np.float32)
    entropy[0] = np.array([0.9, 0.6, 0.3])[:, None]  # mean over 3 steps: 0.6
    entropy[1] = np.array([1.0, 0.4, np.nan])[:, None]  # mean over 2 steps: 0.7
    accepted = np.array(
        [
            [[T, F, F, F, T, T], [T, T, F, F, T, T], [T, T, T, T, T, T]],
            # last step is padding; its True at position 5 must be ignored
            [[T, T, T, F, F, F], [T, T, T, T, F, F], [F, F, F, F, F, T]],
        ]
    )
    return Trajectory(
        argmax=argmax,
        entropy=entropy,
        accepted=accepted,
        steps=np.array([3, 2], dtype=np.int32),
        anchor_mask=np.array([[T, F, F, F, T, T], [T, T, T, F, F, F]]),
        final_ids=np.array([[50, 5, 4, 3, 70, 71], [70, 71, 50, 7, 6, 9]]),
        anchors=[
            [AnchorSpan("order", 4, (70, 71)), AnchorSpan("person", 0, (50,))],
            [AnchorSpan("order", 0, (70, 71)), AnchorSpan("person", 2, (50,))],
        ],
        final_texts=["person asked about the order", "orders person waits"],
        prompt="p",
        prompt_ids=np.array([1, 2]),
        settings=SamplerSettings(),
        model_id="tiny-model",
        event=event,
    )


def test_positions_table():
    df = positions_table(make_trajectory())
    assert len(df) == 2 * 6
    assert "event" not in df.columns and "template" not in df.columns  # the texts live in the samples table
    assert (df.model_id == "tiny-model").all()
    assert df["sample"].tolist() == [0] * 6 + [1] * 6
    assert df.position.tolist() == list(range(6)) * 2
    assert df.concept.tolist() == ["person", "", "", "", "order", "order"] + [
        "order", "order", "person", "", "", "",
    ]
    assert df.is_anchor.tolist() == [T, F, F, F, T, T, T, T, T, F, F, F]
    assert df.final_token_id.tolist() == [50, 5, 4, 3, 70, 71, 70, 71, 50, 7, 6, 9]
    # sample 0 raw flips: pos0 51,50 → 2, pos1 at t2 → 1, pos2 at t1 → 1, pos5 at t2 → 1;
    # anchors (0, 4, 5) reported as 0. Sample 1: pos4 8→6 at t1 → 1; padding ignored.
    assert df.flips.tolist() == [0, 1, 1, 0, 0, 0] + [0, 0, 0, 0, 1, 0]
    # commit = step of last raw flip, anchors included: pos0 t2, pos1 t2, pos2 t1, pos5 t2
    assert df.commit_step.tolist() == [2, 2, 1, 0, 0, 2] + [0, 0, 0, 0, 1, 0]
    np.testing.assert_allclose(df.mean_entropy, [0.6] * 6 + [0.7] * 6, rtol=1e-6)
    # accepted counts over steps run: sample 0 columns of the 3 rows, sample 1 first 2 rows only
    assert df.accepted_steps.tolist() == [3, 2, 1, 1, 3, 3] + [2, 2, 2, 1, 0, 0]


def test_segments_table():
    df = segments_table(make_trajectory())
    assert df[["sample", "left", "right", "pair", "start", "end", "length"]].values.tolist() == [
        [0, "person", "order", "order|person", 1, 4, 3],
        [1, "order", "person", "order|person", 2, 2, 0],
    ]
    # sample 0 free flips at 1..3: (1 + 1 + 0) / 3; sample 1 empty → NaN
    np.testing.assert_allclose(df.instability, [2 / 3, np.nan])
    assert "event" not in df.columns and (df.model_id == "tiny-model").all()


def test_samples_table():
    df = samples_table(make_trajectory())
    assert df["sample"].tolist() == [0, 1]
    assert df.steps.tolist() == [3, 2]
    # free flips: sample 0 (1 + 1 + 0) / 3; sample 1 (0 + 1 + 0) / 3
    np.testing.assert_allclose(df.mean_flips_free, [2 / 3, 1 / 3])
    # last_k = 3 with 3 and 2 steps → whole run: settled = never flipped among the free positions
    # sample 0: pos3 only → 1/3; sample 1: pos3, pos5 → 2/3
    np.testing.assert_allclose(df.settled_share, [1 / 3, 2 / 3])
    assert df.anchor_layout.tolist() == ["person@0,order@4", "order@0,person@2"]
    assert df.final_text.tolist() == ["person asked about the order", "orders person waits"]
    # sample 1: "orders" is not the whole word "order"
    assert df.anchors_intact.tolist() == [2, 1]
    assert df.n_anchors.tolist() == [2, 2]
    # sample 0: order agrees at t0, t1 (t2 has 9) = 2/3; person at t0, t2 (t1 has 51) = 2/3
    # sample 1: both agree at both steps run = 1
    np.testing.assert_allclose(df.mean_agreement, [2 / 3, 1.0])
    assert (df.model_id == "tiny-model").all()


def test_pairs_table():
    df = pairs_table(make_trajectory())
    # one non-empty segment of {order, person} (sample 0); the empty one is not counted
    assert df[["event", "model_id", "pair", "n_segments"]].values.tolist() == [
        ["benign", "tiny-model", "order|person", 1]
    ]
    assert df.instability.tolist() == pytest.approx([2 / 3])


def test_tables_of_several_runs_concatenate():
    runs = [make_trajectory("benign"), make_trajectory("contradictory")]
    df = pd.concat([samples_table(t) for t in runs], ignore_index=True)
    assert df.event.tolist() == ["benign", "benign", "contradictory", "contradictory"]
    assert list(df.columns[:3]) == ["event", "template", "model_id"]


def test_trajectory_without_anchors_gives_empty_segment_tables():
    traj = make_trajectory()
    traj.anchors = [[], []]
    traj.anchor_mask = np.zeros((2, 6), bool)
    assert segments_table(traj).empty and pairs_table(traj).empty
    assert "instability" in pairs_table(traj).columns
    samples = samples_table(traj)
    assert samples.anchor_layout.tolist() == ["", ""]
    assert samples.n_anchors.tolist() == [0, 0] and samples.mean_agreement.isna().all()
