"""Metric functions on hand-built arrays; every expected value is worked out in a comment."""

import math

import numpy as np
import pytest

from petri.core.trajectory import NO_TOKEN, AnchorSpan
from petri.measure.metrics import (
    Segment,
    anchor_agreement,
    anchor_concepts,
    anchor_intact_in_text,
    commit_steps,
    flip_counts,
    pair_instability,
    sample_flip_counts,
    segment_instability,
    segments,
    settled_share,
    step_sum,
)

P = NO_TOKEN  # padding

# Two samples, T = 4 steps at most, L = 3 positions.
ARGMAX = np.array(
    [
        [  # sample 0, ran 4 steps
            [5, 1, 7],
            [6, 1, 7],
            [5, 1, 8],
            [5, 2, 8],
        ],
        [  # sample 1, ran 2 steps; the last two are padding
            [3, 3, 3],
            [3, 4, 3],
            [P, P, P],
            [P, P, P],
        ],
    ],
    dtype=np.int32,
)
STEPS = np.array([4, 2], dtype=np.int32)


def test_flip_counts_ignore_padding():
    # sample 0: pos0 flips at t1 (5→6) and t2 (6→5) = 2; pos1 at t3 (1→2) = 1; pos2 at t2 (7→8) = 1
    # sample 1: pos1 flips at t1 (3→4) = 1; the steps into padding (3→-1, 4→-1) do not count
    np.testing.assert_array_equal(flip_counts(ARGMAX, STEPS), [[2, 1, 1], [0, 1, 0]])


def test_flip_counts_zero_at_anchors():
    mask = np.array([[False, True, False], [False, True, False]])
    # same as above with position 1 of both samples pinned → reported as 0
    np.testing.assert_array_equal(flip_counts(ARGMAX, STEPS, mask), [[2, 0, 1], [0, 0, 0]])


def test_sample_flip_counts_on_one_unpadded_history():
    np.testing.assert_array_equal(sample_flip_counts(ARGMAX[1, :2]), [0, 1, 0])
    np.testing.assert_array_equal(sample_flip_counts(ARGMAX[0]), [2, 1, 1])


def test_commit_steps():
    # commit step = step of the last flip (0 if never flipped)
    # sample 0: pos0 last flips at t2, pos1 at t3, pos2 at t2; sample 1: pos1 at t1, others never
    np.testing.assert_array_equal(commit_steps(ARGMAX, STEPS), [[2, 3, 2], [0, 1, 0]])


def test_settled_share():
    # settled ⇔ commit_step <= max(steps - 1 - k, 0); commits [[2,3,2],[0,1,0]]
    # k=1: sample 0 limit 2 → pos0, pos2 settled = 2/3; sample 1 limit 0 → pos0, pos2 = 2/3
    np.testing.assert_allclose(settled_share(ARGMAX, STEPS, last_k=1), [2 / 3, 2 / 3])
    # k=2: sample 0 limit 1 → none = 0; sample 1 limit max(-1, 0) = 0 → 2/3
    np.testing.assert_allclose(settled_share(ARGMAX, STEPS, last_k=2), [0, 2 / 3])
    # k=1 with pos1 pinned: free {0, 2}, both settled in both samples → 1, 1
    mask = np.array([[False, True, False], [False, True, False]])
    np.testing.assert_allclose(settled_share(ARGMAX, STEPS, 1, mask), [1, 1])
    # no free position at all → NaN
    assert np.isnan(settled_share(ARGMAX, STEPS, 1, np.ones((2, 3), bool))).all()


def test_step_sum_skips_padding_even_nan():
    values = np.ones((2, 4, 3))
    values[1, 2:] = np.nan  # sample 1 padding
    # sample 0: 4 steps of 1; sample 1: 2 steps of 1
    np.testing.assert_array_equal(step_sum(values, STEPS), [[4, 4, 4], [2, 2, 2]])


# --------------------------------------------------------------------------- segments

ORDER = (70, 71)  # a two-token concept
ANCHORS = [
    # sample 0, given out of canvas order: person@1 (pos 1), order@6 (pos 6-7)
    [AnchorSpan("order", 6, ORDER), AnchorSpan("person", 1, (50,))],
    # sample 1: order@0 (pos 0-1), person@2 touches it, item@5
    [AnchorSpan("order", 0, ORDER), AnchorSpan("person", 2, (50,)), AnchorSpan("item", 5, (90,))],
    # sample 2: order@0 (pos 0-1), person@4 — the pair in the other order than sample 0
    [AnchorSpan("person", 4, (50,)), AnchorSpan("order", 0, ORDER)],
]


def test_segments_follow_canvas_order():
    assert segments(ANCHORS) == [
        Segment(0, "person", "order", 2, 6),  # person ends at 2, order starts at 6
        Segment(1, "order", "person", 2, 2),  # adjacent anchors → empty segment
        Segment(1, "person", "item", 3, 5),
        Segment(2, "order", "person", 2, 4),
    ]
    assert Segment(0, "person", "order", 2, 6).pair == ("order", "person")
    assert Segment(1, "order", "person", 2, 2).length == 0


def test_segment_and_pair_instability():
    flips = np.array(
        [
            [0, 0, 1, 2, 3, 0, 0, 0],  # sample 0, segment 2..5: (1+2+3+0)/4 = 1.5
            [0, 0, 0, 4, 2, 0, 0, 0],  # sample 1, empty segment → NaN; segment 3..4: (4+2)/2 = 3
            [0, 0, 5, 1, 0, 0, 0, 0],  # sample 2, segment 2..3: (5+1)/2 = 3
        ]
    )
    segs = segments(ANCHORS)
    values = segment_instability(flips, segs)
    np.testing.assert_allclose(values, [1.5, np.nan, 3.0, 3.0])
    # {order, person}: (person, order) in sample 0 and (order, person) in sample 2 average
    # together; the empty segment of sample 1 is skipped, not counted as 0: (1.5 + 3) / 2 = 2.25
    assert pair_instability(segs, values) == {("item", "person"): 3.0, ("order", "person"): 2.25}


def test_pair_with_only_empty_segments_is_nan():
    segs = [Segment(0, "b", "a", 2, 2)]
    result = pair_instability(segs, segment_instability(np.zeros((1, 4)), segs))
    assert list(result) == [("a", "b")] and math.isnan(result[("a", "b")])


def test_anchor_concepts_layout():
    layout = anchor_concepts(ANCHORS[:1], 8)
    assert layout.tolist() == [["", "person", "", "", "", "", "order", "order"]]


# --------------------------------------------------------------------------- preservation


def test_anchor_agreement():
    argmax = np.array(
        [
            [
                [9, 70, 71, 51],  # order agrees; person does not (51)
                [9, 70, 72, 52],  # order only half agrees (72) → no; person no
                [9, 70, 71, 50],  # both agree
                [P, P, P, P],  # padding, never counted
            ]
        ]
    )
    anchors = [[AnchorSpan("person", 3, (50,)), AnchorSpan("order", 1, ORDER)]]
    # over the 3 steps run (not T = 4): person 1/3, order 2/3, in the order given
    result = anchor_agreement(argmax, np.array([3]), anchors)
    np.testing.assert_allclose(result, [[1 / 3, 2 / 3]])


@pytest.mark.parametrize(
    ("text", "concept", "intact"),
    [
        ("The order was shipped.", "order", True),
        ("order", "order", True),
        ("(order), order-taking", "order", True),  # punctuation and hyphen are boundaries
        ("Two orders shipped.", "order", False),  # plural: not the whole word
        ("A preorder arrived.", "order", False),
        ("Order now.", "order", False),  # case-sensitive
        ("a purchase\norder", "purchase order", True),  # any whitespace inside a phrase
        ("I like C++.", "C++", True),  # concepts with non-word edges still work
        ("I like C++11.", "C++", False),
    ],
)
def test_anchor_intact_whole_word(text, concept, intact):
    assert anchor_intact_in_text(text, concept) is intact


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: flip_counts(ARGMAX[0], STEPS), "argmax"),  # 2-D
        (lambda: flip_counts(ARGMAX.astype(float), STEPS), "argmax"),
        (lambda: flip_counts(ARGMAX, np.array([4])), "steps"),  # wrong length
        (lambda: flip_counts(ARGMAX, np.array([5, 2])), "steps"),  # more than T
        (lambda: flip_counts(ARGMAX, np.array([0, 2])), "steps"),
        (lambda: flip_counts(ARGMAX, np.array([4.0, 2.0])), "steps"),
        (lambda: flip_counts(ARGMAX, STEPS, np.zeros((2, 4), bool)), "anchor_mask"),
        (lambda: flip_counts(ARGMAX, STEPS, np.zeros((2, 3), int)), "anchor_mask"),
        (lambda: sample_flip_counts(ARGMAX), "history"),
        (lambda: settled_share(ARGMAX, STEPS, last_k=0), "last_k"),
        (lambda: step_sum(np.ones((2, 3)), STEPS), "values"),
        (lambda: segment_instability(np.zeros(8), []), "flips"),
        (lambda: segment_instability(np.zeros((1, 4)), [Segment(0, "a", "b", 2, 6)]), "segs"),
        (lambda: segment_instability(np.zeros((1, 4)), [Segment(1, "a", "b", 1, 2)]), "segs"),
        (lambda: pair_instability([Segment(0, "a", "b", 1, 2)], [1.0, 2.0]), "seg_values"),
        (lambda: segments([[AnchorSpan("a", 0, (1, 2)), AnchorSpan("b", 1, (3,))]]), "overlaps"),
        (lambda: segments([[AnchorSpan("a", 0, ())]]), "anchors"),
        (lambda: segments([["order"]]), "anchors"),
        (lambda: anchor_agreement(ARGMAX, STEPS, [[]]), "anchors"),  # one list for two samples
        (lambda: anchor_agreement(ARGMAX, STEPS, [[AnchorSpan("a", 2, (1, 2))], []]), "anchors"),
        (lambda: anchor_concepts([[AnchorSpan("a", -1, (1,))]], 4), "anchors"),
        (lambda: anchor_intact_in_text("text", " "), "concept"),
        (lambda: anchor_intact_in_text(None, "order"), "final_text"),
    ],
)
def test_validation_names_the_bad_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
