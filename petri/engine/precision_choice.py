"""The precision a model runs in, written as one text: a precision, then the FP8 tier's opt-in levers,
each after a ``+`` (issue 25). What ``--precision`` takes (the ``petri`` command, ``app.py``, a study's
:class:`petri.study.execution.executors.ModelSpec`, so Ray workers get the same tier) and what
``experiments/fp8_shift.py`` names its arms by:

- ``bf16`` (the default), ``fp8``, ``fp8-fast``: :func:`petri.engine.cuda.fp8_tier.fp8.set_precision`;
- ``+sc-fp8``: the FP8 self-conditioning (:class:`petri.engine.torch.fast_tier.FastOptions`'
  ``fp8_self_conditioning``; the compiled tier only, since it lives in the compiled logits pass);
- ``+enc-fp8``: the FP8 prompt encoder (``set_precision``'s ``fp8_encoder``).

So ``fp8-fast+sc-fp8`` is the benchmark's fastest configuration (``experiments/bench.py``'s
``petri_fast_compiled_small_fp8fast_sc_fp8``) and ``fp8-fast+sc-fp8+enc-fp8`` the same with the
FP8 encoder. The levers need an FP8 precision. :func:`petri.engine.cuda.fp8_tier.fp8.set_precision_choice` puts
a model in a choice. Sampler names say what ran: ``+sc-fp8``,
``+enc-fp8``, ``+fp8-fast``. Nothing here imports torch (the command line checks the text before a
model loads).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the precisions (fp8-fast: the FP8 tier with the matrix units' fast accumulation too)
PRECISIONS = ("bf16", "fp8", "fp8-fast")
#: lever → the :class:`PrecisionChoice` field it turns on, in the order :attr:`PrecisionChoice.text` writes them
LEVERS = {"sc-fp8": "fp8_self_conditioning", "enc-fp8": "fp8_encoder"}


@dataclass(frozen=True)
class PrecisionChoice:
    """precision: ``"bf16"``, ``"fp8"`` or ``"fp8-fast"``; fp8_self_conditioning (``+sc-fp8``) and
    fp8_encoder (``+enc-fp8``): the FP8 tier's opt-in levers (module docstring)."""

    precision: str = "bf16"
    fp8_self_conditioning: bool = False
    fp8_encoder: bool = False

    @property
    def text(self) -> str:
        """The choice written out, levers in :data:`LEVERS`' order (``parse_precision(c.text) == c``)."""
        return self.precision + "".join(f"+{lever}" for lever, field in LEVERS.items() if getattr(self, field))


def parse_precision(text: str) -> PrecisionChoice:
    """``text`` (module docstring) as a :class:`PrecisionChoice`; ``ValueError`` naming ``precision``
    for an unknown precision or lever, a lever given twice, or a lever on ``bf16``."""
    precision, *levers = str(text).strip().split("+")
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of {', '.join(PRECISIONS)} (in {text!r})")
    unknown = [lever for lever in levers if lever not in LEVERS]
    if unknown:
        raise ValueError(f"precision: unknown lever {'+' + unknown[0]!r} in {text!r} (known: "
                         f"{', '.join('+' + name for name in LEVERS)})")
    if len(set(levers)) < len(levers):
        raise ValueError(f"precision: a lever is named twice in {text!r}")
    if levers and precision == "bf16":
        raise ValueError(f"precision: the FP8 levers ({', '.join('+' + lever for lever in levers)}) need an FP8 "
                         f"precision; {text!r} names bf16 (write fp8 or fp8-fast before them)")
    return PrecisionChoice(precision, **{LEVERS[lever]: True for lever in levers})
