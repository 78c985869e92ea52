"""The decoder's projections that read one input, as one matrix product (issue 25: the compiled
tier's stacked projections).

A decoder layer multiplies the same hidden states by up to five matrices in separate products: its
attention's ``q_proj``, ``k_proj`` and ``v_proj`` (global layers have no ``v_proj``: their values
are the keys), its dense MLP's ``gate_proj`` and ``up_proj``; the decoder's self-conditioning MLP
does the same with its ``gate_proj`` and ``up_proj``. At one sample these products are latency-bound
(256 rows against matrices of 2,048–8,192 rows): measured on an H200
(``experiments/results/kernel_levers_h200_dense_self_conditioning.json``, part ``dense``), one
product with the matrices stacked saves about 0.37 ms of a bf16 step and 0.9 ms of an FP8 one over
the 30 layers.

How: each group gets one bias-free ``nn.Linear`` whose weight is the members' weights stacked along
the output axis, and each member's weight becomes a view of its rows (no second copy; the values,
and so every other path that reads them, are unchanged). The FP8 tier quantizes that stacked layer
instead of the members (:func:`petri.engine.cuda.fp8_tier.fp8.dense_targets`); per-row scales make this the same
quantization, and ``torch._scaled_mm`` gave bit-equal products at the full-size shapes (the
``dense`` part's ``fp8_stacked_equal``). The first member called (the library's order: ``q_proj``,
``gate_proj``) computes the stacked product and returns its columns; the others return theirs when
they are called with the same input tensor, which is how the library calls them. A member called
any other way computes the stacked product itself and takes its own columns, so the result is
right in any order, only slower. The stacked weight is made where the model is: a model moved to
another device afterwards needs the groups installed again (the compiled tier, compiled again).

Shapes: input (..., H) → the stacked product (..., N₁ + … + Nₖ), member i's part (..., Nᵢ).
"""

from __future__ import annotations

import types
from typing import Any

import torch

from petri.engine.base import TorchLoadedModel

#: attribute of a member linear that names its group
GROUP = "_petri_stack"


class StackedProjections:
    """One group: ``members`` (linears with one input, in the library's call order) and ``stacked``,
    the linear of their weights stacked (an ``nn.Linear`` not registered in the model, so its state
    dict and module tree stay the library's)."""

    def __init__(self, members: list[torch.nn.Linear]):
        self.members = members
        self.widths = [m.out_features for m in members]
        weight = torch.cat([m.weight.detach() for m in members])
        self.stacked: Any = torch.nn.Linear(members[0].in_features, weight.shape[0], bias=False,
                                       device=weight.device, dtype=weight.dtype)
        self.stacked.weight = torch.nn.Parameter(weight, requires_grad=False)
        start = 0
        for member, width in zip(members, self.widths):
            member.weight.data = weight[start:start + width]  # a view: no second copy
            start += width
        self._pending: tuple[torch.Tensor, tuple[torch.Tensor, ...], int] | None = None

    def output(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """Member ``index``'s product with ``x``: (..., H) → (..., N_index)."""
        pending = self._pending
        if index > 0 and pending is not None and pending[0] is x and pending[2] == index:
            parts = pending[1]
            self._pending = (x, parts, index + 1) if index + 1 < len(self.members) else None
            return parts[index]
        parts = self.stacked(x).split(self.widths, dim=-1)
        self._pending = (x, parts, index + 1) if index == 0 else None
        return parts[index]


def _member_forward(self, x: torch.Tensor) -> torch.Tensor:
    group, index = getattr(self, GROUP)
    return group.output(index, x)


def projection_groups(model, layers) -> list[list[torch.nn.Linear]]:
    """The groups of ``layers`` (decoder layers) and of the decoder's self-conditioning MLP that can
    be stacked: bias-free linears of one input width, in call order; a group of one is left out."""
    candidates = []
    for layer in layers:
        attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        candidates.append([getattr(attention, name, None) for name in ("q_proj", "k_proj", "v_proj")])
        candidates.append([getattr(mlp, name, None) for name in ("gate_proj", "up_proj")])
    sc = getattr(model.model.decoder, "self_conditioning", None)
    candidates.append([getattr(sc, name, None) for name in ("gate_proj", "up_proj")])
    groups = []
    for candidate in candidates:
        members = [m for m in candidate if isinstance(m, torch.nn.Linear)]
        if len(members) > 1 and all(m.bias is None and m.in_features == members[0].in_features
                                    and m.weight.dtype == members[0].weight.dtype for m in members):
            groups.append(members)
    return groups


def _check_bf16(lm: TorchLoadedModel) -> None:
    if lm.fast_tier.precision != "bf16":
        raise RuntimeError(f"projections are stacked or unstacked with the FP8 tier off (precision is "
                           f"{lm.fast_tier.precision}): the FP8 tier quantizes the stacked layers, not their members")


def stack_projections(lm: TorchLoadedModel, layers) -> int:
    """Install the groups of :func:`projection_groups` on ``layers`` of ``lm``'s model (members
    already stacked are skipped); returns how many groups are new. The FP8 tier must be off
    (``RuntimeError`` otherwise; the compiled tier switches it off around this and on again, so
    that it quantizes the stacked layers)."""
    _check_bf16(lm)
    count = 0
    for members in projection_groups(lm.model, layers):
        if any(is_stacked_member(m) for m in members):
            continue
        group = StackedProjections(members)
        for index, member in enumerate(members):
            setattr(member, GROUP, (group, index))
            member.forward = types.MethodType(_member_forward, member)  # type: ignore[method-assign]  # this instance's own
        count += 1
    return count


def unstack_projections(lm: TorchLoadedModel, layers) -> None:
    """Each member's own forward again (its weight stays a view of the stacked one: same values);
    the FP8 tier must be off, as for :func:`stack_projections`."""
    _check_bf16(lm)
    for members in projection_groups(lm.model, layers):
        for member in members:
            if vars(member).pop(GROUP, None) is not None:
                vars(member).pop("forward", None)


def stacked_groups(model) -> list[StackedProjections]:
    """The groups installed on ``model``'s decoder, each once, in module order."""
    found: dict[int, StackedProjections] = {}
    for module in model.model.decoder.modules():
        entry = vars(module).get(GROUP)
        if entry is not None:
            found.setdefault(id(entry[0]), entry[0])
    return list(found.values())


def is_stacked_member(module) -> bool:
    """Whether ``module`` is a member of an installed group (its product comes from the group's)."""
    return GROUP in vars(module)
