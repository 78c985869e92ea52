"""A model kept in host memory by the main process and put on the GPU inside each ZeroGPU call (issue 63).

On a ZeroGPU Space the main process must never initialise CUDA; each ``spaces.GPU`` call runs in a
forked child that has a GPU. petri loads the model on the CPU in the main process, where it stays, and
:func:`place_on_card` puts it on the card inside the child at the call's start: the weights are copied
to the GPU (``Module.to``), the FP8 tier is built there if the plan asks for it, and the fast tier's
sessions and captured graphs are made lazily by the first step, as on a dedicated GPU. Nothing is
assumed to survive the call: a fresh child places again (:class:`CardPlacement` keeps the placed model
for the life of one process only, keyed by its pid, so a reused child skips the copy).

(``spaces`` itself offers another route: ``.to("cuda")`` at import under its emulation, the weights
packed at ``launch()`` and copied into each child. It cannot run off-Space, so petri's fork harness could
not test it; the route here runs the same under the harness and on a Space, and its cost, the copy
of every weight from host memory at a cold start, is measured on an H100 by
``experiments/zerogpu_device.py``.)

:func:`card_tier` picks the tier for a ZeroGPU card size (:data:`ZEROGPU_CARDS`) from the model's
sizes, with :func:`petri.engine.torch.tier_memory.choose_tier`'s estimate and no compiled tier
(``torch.compile`` is not supported on ZeroGPU): bf16 where it fits, else an FP8 tier, else a
:class:`~petri.engine.torch.tier_memory.TierMemoryError` naming what would fit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from petri.engine.torch.tier_memory import GIB, PLANNING_SHAPE, Tier, TierMemoryError, WeightCounts, choose_tier

#: ZeroGPU's card sizes (``spaces.GPU(size=...)``): the GPU memory each gives, in bytes (hub docs,
#: December 2026: ``large``, the default, half an RTX Pro 6000 Blackwell, 48 GB; ``xlarge`` the whole
#: card, 96 GB, counted double against the quota).
ZEROGPU_CARDS = {"large": 48 * 10**9, "xlarge": 96 * 10**9}


def card_tier(counts: WeightCounts, size: str, shape: tuple[int, int] = PLANNING_SHAPE) -> Tier:
    """The tier a model of ``counts`` runs in on a ZeroGPU card of ``size`` (a key of
    :data:`ZEROGPU_CARDS`) at ``shape`` (samples, prompt tokens): bf16 where it fits, else FP8 (kept,
    then released), never compiled. Raises ``ValueError`` naming ``size`` for an unknown size and
    :class:`~petri.engine.torch.tier_memory.TierMemoryError` where no tier fits, saying so for the card."""
    if size not in ZEROGPU_CARDS:
        raise ValueError(f"size: {size!r} is not a ZeroGPU card size (one of {', '.join(ZEROGPU_CARDS)})")
    memory = ZEROGPU_CARDS[size]
    refusals = []
    for precision in ("bf16", "fp8"):
        try:
            return choose_tier(counts, memory, memory, compile=False, precision=precision, compile_ok=False,
                               shape=shape, device=f"a ZeroGPU {size} card")
        except TierMemoryError as err:
            refusals.append(str(err))
    raise TierMemoryError(f"no tier fits a ZeroGPU {size} card ({memory / GIB:.1f} GiB): {refusals[-1]}")


def placement_for(lm, size: str) -> CardPlacement:
    """How a ZeroGPU call puts ``lm`` on its card: CUDA, in the tier :func:`card_tier` picks for a
    DiffusionGemma on a ``size`` card (one that fits no tier there raises
    :class:`~petri.engine.torch.tier_memory.TierMemoryError`, naming the card: at start-up), bf16 for
    another family."""
    from petri.engine.families.registry import UNIFORM
    from petri.engine.torch.tier_memory import weight_counts

    if getattr(lm, "family", None) != UNIFORM.id or not hasattr(lm, "model"):
        return CardPlacement("cuda", "bf16")
    return CardPlacement("cuda", card_tier(weight_counts(lm.model), size).precision_text)


@dataclass
class CardPlacement:
    """Where and how the served model runs inside a GPU call: ``device`` (``"cuda"`` on a Space;
    ``"cpu"`` leaves the model where it is, what the CPU tests use) and ``precision`` (``--precision``'s
    text). :meth:`model` gives the placed model, placing it once per process."""

    device: str = "cuda"
    precision: str = "bf16"
    _placed: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    def model(self, lm):
        """``lm`` placed (:func:`place_on_card`) in this process; the same object again while the
        process lives (a reused ZeroGPU child), placed anew in a fresh one."""
        pid = os.getpid()
        if pid not in self._placed:
            self._placed.clear()  # a forked child's copy of its parent's placements is not its own
            self._placed[pid] = place_on_card(lm, self.device, self.precision)
        return self._placed[pid]


def place_on_card(lm, device: str = "cuda", precision: str = "bf16"):
    """``lm`` (a :class:`~petri.engine.torch.model.LoadedModel` or another torch model with ``model``
    and ``device`` fields) with its weights on ``device``: ``lm`` itself where it is already there in
    bf16, else a copy whose ``model`` was moved there in place (in a forked child, the child's copy
    of the parent's memory: the parent's model stays where it was) with a fresh fast tier, in the FP8
    tier ``precision`` asks for. Off CUDA the precision must be bf16 (``ValueError`` naming
    ``precision``)."""
    import torch

    from petri.engine.precision_choice import PrecisionChoice, parse_precision

    choice = parse_precision(precision)
    target = torch.device(device)
    if choice != PrecisionChoice() and target.type != "cuda":
        raise ValueError(f"precision: {choice.text!r} needs a CUDA card; the placement is on {device!r}")
    if lm.device.type == target.type and choice == PrecisionChoice():
        return lm
    lm.model.to(target)
    placed = replace(lm, device=target, **({"fast_tier": None} if hasattr(lm, "fast_tier") else {}))
    if choice != PrecisionChoice():
        from petri.engine.cuda.fp8_tier.fp8 import set_precision_choice

        set_precision_choice(placed, choice)
    return placed
