"""The per-step record (petri.engine.loop.Record) is written by one writer, whichever way its rows
are kept: appended per step (the eager stepper) or in (T, S, L) buffers written in place at a step
index or at a device counter (the CUDA fast path, petri.engine.cuda.step_logs.StepLogs). Both give
the record a hand-worked example expects, on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from petri.engine.cuda.step_logs import StepLogs
from petri.engine.loop import RECORD_LAYOUT, Record
from petri.engine.torch.array_ops import TorchOps

NAN = float("nan")
# Two samples, three positions, three steps; sample 1 has finished before step 2.
RUNNING = [[True, True], [True, True], [True, False]]
ARGMAX = [[[5, 6, 7], [8, 9, 10]], [[11, 12, 13], [14, 15, 16]], [[17, 18, 19], [20, 21, 22]]]
ENTROPY = [[[0.5, 1.5, 2.5], [0.25, 0.75, 1.25]], [[3.0, 2.0, 1.0], [0.125, 0.5, 4.0]],
           [[0.0, 1.0, 2.0], [9.0, 9.0, 9.0]]]
ACCEPTED = [[[True, False, True], [False, False, True]], [[True, True, False], [True, False, False]],
            [[False, True, True], [True, True, True]]]
CANVAS = [[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]], [[13, 14, 15], [16, 17, 18]]]

#: The record worked by hand, (S, T, L): sample 1's step 2 reads as finished (-1, NaN, False, -1).
EXPECTED = {
    "argmax": np.array([[[5, 6, 7], [11, 12, 13], [17, 18, 19]],
                        [[8, 9, 10], [14, 15, 16], [-1, -1, -1]]], dtype=np.int32),
    "entropy": np.array([[[0.5, 1.5, 2.5], [3.0, 2.0, 1.0], [0.0, 1.0, 2.0]],
                         [[0.25, 0.75, 1.25], [0.125, 0.5, 4.0], [NAN, NAN, NAN]]], dtype=np.float32),
    "accepted": np.array([[[True, False, True], [True, True, False], [False, True, True]],
                          [[False, False, True], [True, False, False], [False, False, False]]]),
    "canvas": np.array([[[1, 2, 3], [7, 8, 9], [13, 14, 15]],
                        [[4, 5, 6], [10, 11, 12], [-1, -1, -1]]], dtype=np.int32),
    "steps": np.array([3, 2], dtype=np.int32),
}


def write_steps(record: Record, where) -> list:
    """Drive ``record`` through the three steps as a stepper does (count, then write the row at
    ``where(step)``), the step's inputs in the sampler's dtypes (int64 ids, float32 entropy);
    returns each step's live rows."""
    lives = []
    for step in range(3):
        running = torch.tensor(RUNNING[step])
        record.count(running)
        record.write(running, torch.tensor(ARGMAX[step]), torch.tensor(ENTROPY[step]), torch.tensor(ACCEPTED[step]),
                     torch.tensor(CANVAS[step]), where(step))
        lives.append(record.live(step, ~running))
    return lives


def kept_in(kind: str) -> tuple[Record, object]:
    """A record of 2 samples × 3 positions kept as ``kind``, and how it is indexed at a step."""
    ops = TorchOps(torch.device("cpu"))
    if kind == "appended":
        return Record(ops, 2), lambda step: None
    logs = StepLogs(4, 2, 3, torch.device("cpu"))  # room for one step more than run: never read
    if kind == "buffers at a step index":
        return Record(ops, 2, logs), lambda step: step
    counter = torch.zeros(1, dtype=torch.long)  # the graph's device counter, advanced per step

    def at_counter(step):
        counter.fill_(step)
        return counter
    return Record(ops, 2, logs), at_counter


KINDS = ["appended", "buffers at a step index", "buffers at a device counter"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_record_is_the_hand_worked_one_however_its_rows_are_kept(kind):
    record, where = kept_in(kind)
    lives = write_steps(record, where)
    host = record.host(3)
    assert set(host) == {name for name, _, _ in RECORD_LAYOUT} | {"steps"}
    for name, expected in EXPECTED.items():
        assert host[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(host[name], expected, err_msg=name)
    for step, live in enumerate(lives):
        assert live.index == step
        np.testing.assert_array_equal(live.argmax, EXPECTED["argmax"][:, step])
        np.testing.assert_array_equal(live.canvas, EXPECTED["canvas"][:, step])
        np.testing.assert_array_equal(live.accepted, EXPECTED["accepted"][:, step])
        np.testing.assert_array_equal(live.finished, ~np.array(RUNNING[step]))


def test_the_buffers_start_over_on_reset_and_copy_only_the_steps_run():
    record, where = kept_in("buffers at a step index")
    write_steps(record, where)
    record.rows.reset()
    running = torch.tensor([False, True])
    record.count(running)
    record.write(running, torch.tensor(ARGMAX[0]), torch.tensor(ENTROPY[0]), torch.tensor(ACCEPTED[0]),
                 torch.tensor(CANVAS[0]), 0)
    host = record.host(1)
    assert host["argmax"].shape == (2, 1, 3)
    np.testing.assert_array_equal(host["argmax"][:, 0], [[-1, -1, -1], [8, 9, 10]])
    np.testing.assert_array_equal(host["entropy"][:, 0], [[NAN] * 3, [0.25, 0.75, 1.25]])
    np.testing.assert_array_equal(host["steps"], [0, 1])
