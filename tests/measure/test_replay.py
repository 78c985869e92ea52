"""The step-by-step record (petri.measure.replay) on a hand-worked two-sample trajectory: the tidy steps table,
one sample's record for the viewer, one frame and the per-step curves, every expected value by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from petri.core.trajectory import AnchorSpan, SamplerSettings, Trajectory
from petri.measure.replay import STEP_COLUMNS, confidence, frame, live_record, sample_record, step_curves, steps_table, visible_text

# sample 0 runs 3 steps, sample 1 stops after 2 (its step 2 is padding)
ARGMAX = np.array([
    [[5, 7, 1], [5, 8, 1], [6, 8, 2]],      # flips: t1 @1; t2 @0 (and @2, its anchor: not counted)
    [[1, 2, 3], [1, 3, 3], [-1, -1, -1]],   # flips: t1 @1
], dtype=np.int32)
ENTROPY = np.array([
    [[0.0, 1.0, 2.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]],
    [[1.0, 1.0, 1.0], [0.0, 2.0, 0.0], [np.nan] * 3],
], dtype=np.float32)
ACCEPTED = np.array([
    [[1, 0, 1], [1, 1, 1], [1, 1, 1]],
    [[1, 0, 0], [1, 0, 1], [0, 0, 0]],
], dtype=bool)
CANVAS = np.array([  # the canvas after each step: anchors in place, -1 past a sample's steps
    [[5, 3, 2], [5, 8, 2], [6, 8, 2]],
    [[1, 7, 3], [1, 5, 3], [-1, -1, -1]],
], dtype=np.int32)
ANCHORS = [[AnchorSpan("order", 2, (2,))], [AnchorSpan("person", 0, (1,))]]
MASK = np.array([[False, False, True], [True, False, False]])
WORDS = {1: "a", 2: "order", 3: "b", 5: "x", 6: "y", 7: "z", 8: "<eos>"}


def decode(i: int) -> str:
    return WORDS.get(i, "?")


def trajectory() -> Trajectory:
    return Trajectory(
        argmax=ARGMAX, entropy=ENTROPY, accepted=ACCEPTED, steps=np.array([3, 2], dtype=np.int32),
        anchor_mask=MASK, final_ids=np.array([[6, 8, 2], [1, 3, 3]]), anchors=ANCHORS, final_texts=["", ""],
        prompt="p", prompt_ids=np.array([1]), settings=SamplerSettings(max_denoising_steps=3), model_id="hand",
        canvas=CANVAS,
    )


def test_steps_table_one_row_per_sample_step_position_by_hand():
    table = steps_table(trajectory(), decode)
    assert list(table.columns) == STEP_COLUMNS
    assert len(table) == (3 + 2) * 3  # padding left out
    row = table[(table["sample"] == 0) & (table["step"] == 2) & (table["position"] == 0)].iloc[0]
    assert (row["token_id"], row["token_text"], row["entropy"], bool(row["accepted"]), row["anchor"]) == (6, "y", 0.0, True, "")
    row = table[(table["sample"] == 1) & (table["step"] == 1) & (table["position"] == 1)].iloc[0]
    assert (row["token_id"], row["token_text"], row["entropy"], bool(row["accepted"]), row["anchor"]) == (3, "b", 2.0, False, "")
    assert table[(table["sample"] == 1) & (table["position"] == 0)]["anchor"].tolist() == ["person", "person"]
    assert table[(table["sample"] == 0) & (table["position"] == 2)]["anchor"].tolist() == ["order"] * 3
    assert set(table[table["sample"] == 1]["step"]) == {0, 1}
    assert table["token_id"].min() >= 0  # no padding id
    s0 = table[(table["sample"] == 0) & (table["step"] == 0)]
    assert s0["canvas_id"].tolist() == [5, 3, 2] and s0["canvas_text"].tolist() == ["x", "b", "order"]
    s1 = table[(table["sample"] == 1) & (table["step"] == 1)]
    assert s1["canvas_id"].tolist() == [1, 5, 3] and s1["canvas_text"].tolist() == ["a", "x", "b"]
    from dataclasses import replace
    old = steps_table(replace(trajectory(), canvas=None), decode)  # a run stored before the canvas was recorded
    assert (old["canvas_id"] == -1).all() and (old["canvas_text"] == "").all() and list(old.columns) == STEP_COLUMNS


def test_confidence_is_exp_minus_entropy():
    assert confidence([0.0, math.log(4)]).tolist() == pytest.approx([1.0, 0.25])
    assert np.isnan(confidence([np.nan])[0])


def test_sample_record_by_hand():
    rec = sample_record(trajectory(), 0, decode, special=lambda i: WORDS.get(i, "").startswith("<"))
    assert rec["steps"] == 3 and rec["length"] == 3 and rec["n_samples"] == 2
    assert rec["ids"] == [[5, 7, 1], [5, 8, 1], [6, 8, 2]]
    assert rec["flipped"] == [[0, 0, 0], [0, 1, 0], [1, 0, 0]]  # the anchor's own change (t2 @2) not marked
    assert rec["accepted"] == [[1, 0, 1], [1, 1, 1], [1, 1, 1]]
    assert rec["conf"][0] == pytest.approx([1.0, round(math.exp(-1), 3), round(math.exp(-2), 3)])
    assert rec["texts"] == {"1": "a", "2": "order", "3": "b", "5": "x", "6": "y", "7": "z", "8": "<eos>"}  # canvas ids too
    assert rec["special"] == [8]
    assert rec["anchor"] == ["", "", "order"]
    assert rec["commit"] == [2, 1, 2]  # last change of the raw argmax, anchors included
    assert rec["canvas"] == CANVAS[0].tolist() and rec["final"] == [6, 8, 2]
    assert rec["family"] == "uniform-diffusion" and rec["mask_id"] is None
    short = sample_record(trajectory(), 1, decode)
    assert short["steps"] == 2 and short["ids"] == [[1, 2, 3], [1, 3, 3]] and short["flipped"] == [[0, 0, 0], [0, 1, 0]]
    with pytest.raises(ValueError, match="sample"):
        sample_record(trajectory(), 2, decode)


def test_frame_of_one_step_by_hand():
    f = frame(trajectory(), 0, 1, decode)
    assert f["token_text"].tolist() == ["x", "<eos>", "a"]
    assert f["flipped"].tolist() == [False, True, False]
    assert f["confidence"].tolist() == pytest.approx([math.exp(-0.5), 1.0, 1.0])
    with pytest.raises(ValueError, match="step"):
        frame(trajectory(), 1, 2, decode)  # sample 1 ran steps 0..1


def test_step_curves_by_hand():
    curves = step_curves(trajectory())
    s0 = curves[curves["sample"] == 0]
    assert s0["mean_entropy_free"].tolist() == pytest.approx([0.5, 0.25, 0.0])  # positions 0, 1 free
    assert s0["accepted_free"].tolist() == [1, 2, 2]
    assert s0["flips"].tolist() == [0, 1, 1]
    s1 = curves[curves["sample"] == 1]
    assert s1["step"].tolist() == [0, 1]  # padding left out
    assert s1["mean_entropy_free"].tolist() == pytest.approx([1.0, 1.0])  # positions 1, 2 free
    assert s1["accepted_free"].tolist() == [0, 1]
    assert s1["flips"].tolist() == [0, 1]


def test_visible_text_leaves_nothing_invisible():
    assert [visible_text(t) for t in ["\n", "a\nb", "  ", "", "\t", "<eos>", " cat"]] == ["↵", "a↵b", "␣␣", "∅", "⇥", "<eos>", " cat"]


def test_live_record_cuts_the_stopped_steps_and_marks_flips_by_hand():
    ids = np.array([[5, 7, 1], [5, 8, 1], [6, 8, 2], [-1, -1, -1]])  # the sample stopped after step 2
    rec = live_record(ids, ["", "", "order"], [False, False, True], decode)
    assert rec["steps"] == 3 and rec["ids"] == ids[:3].tolist()
    assert rec["flipped"] == [[0, 0, 0], [0, 1, 0], [1, 0, 0]]
    assert rec["conf"] is None and rec["accepted"] is None and rec["anchor"] == ["", "", "order"]
    assert rec["texts"]["8"] == "<eos>" and rec["commit"] == [2, 1, 2]
    assert live_record(np.zeros((0, 3), dtype=int), ["", "", ""], [False] * 3, decode)["steps"] == 0
    canvas = np.array([[5, 3, 2], [5, 8, 2], [6, 8, 2], [-1, -1, -1]])
    accepted = np.array([[1, 0, 1], [1, 1, 1], [1, 1, 1], [0, 0, 0]], dtype=bool)
    rec = live_record(ids, ["", "", "order"], [False, False, True], decode, canvas=canvas, accepted=accepted,
                      family="masked-diffusion", mask_id=3)
    assert rec["canvas"] == canvas[:3].tolist() and rec["accepted"] == accepted[:3].astype(int).tolist()
    assert rec["family"] == "masked-diffusion" and rec["mask_id"] == 3 and rec["final"] is None
    assert rec["texts"]["3"] == "b"


@pytest.mark.skipif(__import__("shutil").which("ffmpeg") is None,
                    reason="no ffmpeg on PATH: MP4 export needs one (the GIF does not); CI has none on purpose")
@pytest.mark.parametrize("sample", [0, 1])
def test_the_mp4_has_one_frame_per_step_of_the_sample_where_ffmpeg_exists(tmp_path, sample):
    """Counted by decoding the file with ffmpeg (one ``framemd5`` line per decoded frame)."""
    import shutil
    import subprocess

    from petri.study.figures.animation import write_mp4

    path = write_mp4(trajectory(), sample, decode, tmp_path / f"s{sample}.mp4", frame_ms=400)
    assert path.read_bytes()[4:8] == b"ftyp"  # an ISO-BMFF (MP4) file
    listing = subprocess.run([shutil.which("ffmpeg"), "-loglevel", "error", "-i", str(path), "-map", "0:v:0",
                              "-f", "framemd5", "-"], capture_output=True, text=True, check=True).stdout
    frames = [line for line in listing.splitlines() if line and not line.startswith("#")]
    assert len(frames) == [3, 2][sample]  # steps of the hand trajectory
