"""Where the CUDA fast path's :class:`petri.engine.loop.Record` keeps its rows: buffers preallocated
for the most steps a request may run, written in place, so a captured CUDA graph can write them.

The record's layout (fields, dtypes, the values of a finished sample) is
:data:`petri.engine.loop.RECORD_LAYOUT`, and the rows are made by :meth:`~petri.engine.loop.Record.write`;
this class only stores them. Inside a captured graph the write is an ``index_copy_`` at the device
counter; on a GPU, ``python -m pytest -q tests/engine/cuda/test_fast_sampler.py`` checks that the
replayed graphs give the eager race loop's record and never synchronise.
"""

from __future__ import annotations

import torch

from petri.engine.loop import RECORD_LAYOUT


class StepLogs:
    """Rows of the record in (T, S, L) buffers on ``device`` for T = ``max_steps``, each field's
    dtype and initial value from :data:`~petri.engine.loop.RECORD_LAYOUT` (a step that never ran
    reads as finished), and the steps each sample ran (S,) int32 counted in place."""

    def __init__(self, max_steps: int, batch: int, length: int, device: torch.device):
        self.buffers = tuple(torch.full((max_steps, batch, length), fill, dtype=getattr(torch, dtype), device=device)
                             for _, dtype, fill in RECORD_LAYOUT)
        self.steps = torch.zeros(batch, dtype=torch.int32, device=device)

    def reset(self) -> None:
        """Back to no step run (a new request in the same buffers)."""
        for buffer, (_, _, fill) in zip(self.buffers, RECORD_LAYOUT):
            buffer.fill_(fill)
        self.steps.zero_()

    def add_steps(self, added: torch.Tensor) -> None:
        self.steps += added

    def put(self, row: tuple, index: int | torch.Tensor) -> None:
        """Write ``row`` (one (S, L) tensor per field) at step ``index``: a Python int, or a (1,) int64
        device counter (inside a captured graph, where the step is not a host value)."""
        for buffer, value in zip(self.buffers, row):
            if isinstance(index, torch.Tensor):
                buffer.index_copy_(0, index, value[None])
            else:
                buffer[index] = value

    def row(self, index: int) -> list[torch.Tensor]:
        return [buffer[index] for buffer in self.buffers]

    def stacked(self, steps_run: int) -> list[torch.Tensor]:
        """Each field's first ``steps_run`` steps as (S, T, L) (a view of the buffer)."""
        return [buffer[:steps_run].permute(1, 0, 2) for buffer in self.buffers]
