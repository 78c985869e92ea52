"""The arrays a sampling request records, declared once (numpy only).

:data:`RECORDED` is the one list of them: name, dtype, shape (in ``S`` samples, ``T`` steps run,
``L`` canvas positions, ``P`` prompt tokens), meaning, and, for the per-step fields, the value a
step holds where its sample had already finished. Everything that records, stores or reads the
arrays reads this declaration:

- the engine's recorder (:data:`petri.engine.loop.RECORD_LAYOUT`: one row per step of every
  :data:`STEP_FIELDS` field, with its dtype and finished value);
- :class:`petri.core.trajectory.Trajectory` (the shapes it checks) and
  :func:`petri.core.trajectory.assemble_trajectory` (the record as one mapping, cast to the dtypes);
- the run store (:mod:`petri.runs.store`: the arrays of the compressed blob, the optional ones
  read back as ``None`` for runs stored before they were recorded);
- the one-sample slice of the exports (:func:`petri.runs.formats.one_sample`) and the API's
  ``include_trajectories`` rows (:mod:`petri.web.api.responses`: the per-step fields it answers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Shape letters: S samples, T the most steps any sample ran, L the canvas length, P the prompt length.
DIMENSIONS = ("S", "T", "L", "P")


@dataclass(frozen=True)
class RecordedField:
    """One recorded array. ``shape``: its axes as :data:`DIMENSIONS` letters (``("S", "T", "L")``
    for a per-step field). ``finished``: the value a per-step field holds past a sample's last
    step (``None`` for the others). ``optional``: runs stored before it was recorded lack it (their
    trajectories hold ``None``). ``api``: the API answers it per sample on request
    (``include_trajectories``: the sample's rows of the steps it ran)."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    meaning: str
    finished: Any = None
    optional: bool = False
    api: bool = False

    def __post_init__(self):
        if not set(self.shape) <= set(DIMENSIONS):
            raise ValueError(f"shape: {self.shape!r} of {self.name!r} uses an axis outside {DIMENSIONS}")
        np.dtype(self.dtype)  # a numpy dtype name, or TypeError naming it

    @property
    def per_step(self) -> bool:
        """Whether it holds one (S, L) row per step."""
        return self.shape == ("S", "T", "L")

    @property
    def per_sample(self) -> bool:
        """Whether its first axis is the sample (a one-sample slice keeps it)."""
        return self.shape[:1] == ("S",)

    def cast(self, value) -> np.ndarray:
        """``value`` as a numpy array of this field's dtype."""
        return np.asarray(value).astype(self.dtype)

    def expected(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The shape it must have, given the sizes of the axes (``{"S": 3, "T": 8, "L": 40}``)."""
        return tuple(sizes[axis] for axis in self.shape)


RECORDED: tuple[RecordedField, ...] = (
    RecordedField("argmax", "int32", ("S", "T", "L"), "the raw argmax of the model's logits at each step and "
                  "position, before any anchor was forced", finished=-1, api=True),
    RecordedField("entropy", "float32", ("S", "T", "L"), "the entropy (nats) of the temperature-scaled "
                  "distribution the sampler accepts from", finished=float("nan")),
    RecordedField("accepted", "bool", ("S", "T", "L"), "whether the sampler accepted the denoiser's token "
                  "there (anchor positions always are)", finished=False),
    RecordedField("canvas", "int32", ("S", "T", "L"), "the tokens on the canvas after the step: what the next "
                  "step reads", finished=-1, optional=True, api=True),
    RecordedField("steps", "int32", ("S",), "the denoising steps each sample ran (adaptive stopping ends samples "
                  "at different steps)"),
    RecordedField("anchor_mask", "bool", ("S", "L"), "the positions pinned to an anchor token"),
    RecordedField("final_ids", "int64", ("S", "L"), "the returned canvas: uniform diffusion, the last argmax with "
                  "the anchors in place; masked diffusion, the last canvas"),
    RecordedField("prompt_ids", "int64", ("P",), "the encoded prompt, shared by every sample"),
)

#: The per-step fields, in the recorder's order: one (S, L) row per step each.
STEP_FIELDS: tuple[RecordedField, ...] = tuple(f for f in RECORDED if f.per_step)

#: Every recorded field by name.
FIELDS: dict[str, RecordedField] = {f.name: f for f in RECORDED}

#: The recorded arrays of one request by field name (what a sampler backend hands over).
Record = Mapping[str, Any]


def cast_record(record: Record) -> dict[str, np.ndarray | None]:
    """``record`` with every declared field cast to its dtype (an optional one absent or ``None``
    stays ``None``); a required field that is missing, or a name that is no field, is refused by name."""
    unknown = set(record) - set(FIELDS)
    if unknown:
        raise ValueError(f"record: {sorted(unknown)} are no recorded field (fields: {list(FIELDS)})")
    out: dict[str, np.ndarray | None] = {}
    for f in RECORDED:
        value = record.get(f.name)
        if value is None and not f.optional:
            raise ValueError(f"record: {f.name!r} is missing")
        out[f.name] = None if value is None else f.cast(value)
    return out
