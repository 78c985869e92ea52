"""Issue 61, item 3: the recorded arrays are declared once (petri.core.recorded.RECORDED), and the
recorder, the trajectory, assemble_trajectory, the store and the API read that declaration."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import numpy as np
import pytest

from petri.core.recorded import FIELDS, RECORDED, STEP_FIELDS, RecordedField, cast_record
from petri.core.trajectory import AnchorSpan, SamplerSettings, assemble_trajectory

S, T, L = 2, 3, 5


def record(**changes) -> dict:
    """A hand-made record of S=2 samples, T=3 steps, L=5 positions in wider dtypes than declared."""
    base = {
        "argmax": np.arange(S * T * L, dtype=np.int64).reshape(S, T, L),
        "entropy": np.full((S, T, L), 0.5, dtype=np.float64),
        "accepted": np.ones((S, T, L), dtype=np.int64),
        "canvas": np.zeros((S, T, L), dtype=np.int64),
        "steps": np.array([3, 2], dtype=np.int64),
        "anchor_mask": np.zeros((S, L), dtype=np.int64),
        "final_ids": np.ones((S, L), dtype=np.int32),
    }
    return {**base, **changes}


REQUEST = SimpleNamespace(prompt_ids=[5, 6, 7], layouts=[[AnchorSpan("a", 0, (9,))], []], settings=SamplerSettings(),
                          seed=4, prompt_text="a prompt")
LM = SimpleNamespace(tokenizer=None, model_id="toy", device="cpu")


def test_assemble_trajectory_takes_the_record_as_one_mapping_and_casts_it_to_the_declared_dtypes():
    traj = assemble_trajectory(LM, record(), REQUEST, timings={"total_s": 1.0}, sampler="eager")
    for name, dtype in (("argmax", np.int32), ("entropy", np.float32), ("accepted", np.bool_), ("canvas", np.int32),
                        ("steps", np.int32), ("anchor_mask", np.bool_), ("final_ids", np.int64), ("prompt_ids", np.int64)):
        assert getattr(traj, name).dtype == dtype, name
    assert traj.prompt_ids.tolist() == [5, 6, 7] and traj.seed == 4 and traj.prompt == "a prompt"
    assert traj.final_texts == ["", ""] and traj.anchors[0][0].concept == "a" and traj.model_id == "toy"
    without_canvas = record()
    del without_canvas["canvas"]  # optional: a backend that records none
    assert assemble_trajectory(LM, without_canvas, REQUEST, timings={}).canvas is None


def test_a_bad_record_is_refused_by_the_field_it_gets_wrong():
    with pytest.raises(ValueError, match="'entropy' is missing"):
        cast_record({k: v for k, v in record().items() if k != "entropy"})
    with pytest.raises(ValueError, match="logits"):
        cast_record(record(logits=np.zeros((S, T, L))))
    with pytest.raises(ValueError, match=r"Trajectory.accepted has shape \(2, 2, 5\), expected \(2, 3, 5\)"):
        assemble_trajectory(LM, record(accepted=np.ones((S, 2, L))), REQUEST, timings={})
    with pytest.raises(ValueError, match=r"Trajectory.anchor_mask has shape"):
        assemble_trajectory(LM, record(anchor_mask=np.zeros((S, L + 1))), REQUEST, timings={})
    with pytest.raises(ValueError, match="shape"):
        RecordedField("x", "int32", ("S", "Q"), "an unknown axis")
    with pytest.raises(TypeError):
        RecordedField("x", "no-such-dtype", ("S",), "an unknown dtype")


def test_the_recorder_reads_the_declaration():
    from petri.engine.loop import RECORD_LAYOUT

    assert RECORD_LAYOUT[:3] == (("argmax", "int32", -1), ("entropy", "float32", RECORD_LAYOUT[1][2]),
                                 ("accepted", "bool", False))
    assert np.isnan(RECORD_LAYOUT[1][2]) and RECORD_LAYOUT[3] == ("canvas", "int32", -1)
    assert [name for name, _, _ in RECORD_LAYOUT] == [f.name for f in STEP_FIELDS]


def test_the_store_writes_every_declared_array_and_every_other_field_in_its_header():
    from petri.runs.store import trajectory_from_blobs, trajectory_to_blobs

    traj = assemble_trajectory(LM, record(), REQUEST, timings={"total_s": 1.0})
    header, blob = trajectory_to_blobs(traj)
    with np.load(io.BytesIO(blob)) as data:
        assert sorted(data.files) == sorted(f.name for f in RECORDED)
    assert list(json.loads(header)) == ["anchors", "final_texts", "prompt", "settings", "model_id", "seed", "device",
                                        "timings", "event", "template", "sampler", "family", "mask_id"]
    back = trajectory_from_blobs(header, blob)
    for f in RECORDED:
        assert np.array_equal(getattr(back, f.name), getattr(traj, f.name)), f.name
        assert getattr(back, f.name).dtype == np.dtype(FIELDS[f.name].dtype), f.name
    assert back.anchors == traj.anchors and back.settings == traj.settings and back.mask_id is None
