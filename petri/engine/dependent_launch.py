"""Programmatic dependent launch for petri's Triton kernels (issue 25's launch lever; opt-in, Hopper).

What it does: a kernel launched with CUDA's programmatic stream serialization may start while the
kernel before it in the stream is still finishing. Each of its programs first waits
(``griddepcontrol.wait``) until that kernel has completed and its writes are visible, then lets
the kernel after it launch in turn (``griddepcontrol.launch_dependents``): the launch, the
scheduling of its programs and their set-up overlap the tail of the kernel before, which at one
sample is a large share of the several hundred small kernels of a step. Every Triton kernel of
petri's takes a ``PDL`` constexpr and begins with :func:`wait_then_release` (``PDL`` false: nothing,
the kernel compiles as before); :func:`launch_options` gives a launch its ``PDL`` and ``launch_pdl``.

Why no kernel reads too early: the wait is each program's first statement, before any load or
store, so none reads what the kernel before still writes or writes what it still reads; and as a
kernel completes only after its wait returned, completion runs transitively down the stream (the
kernel two back had completed before the one before finished waiting). A kernel launched without it
(cuBLAS, the attention kernels, Inductor's) starts after the one before completes, as always.

Who launches dependent: the model's tier (:attr:`petri.engine.fast_tier.FastTier.dependent_launch`,
set by ``compile_for_sampling(lm, dependent_launch=True)``, cleared by ``uncompile_regions``; sampler
names ``+pdl``). The fast sampler's calls and the prompt encoder's captured passes run
:func:`launched_dependent` as it says (:func:`as_the_tier_says`), a context variable read where a
kernel is launched (inside custom ops, which see tensors only; never under ``torch.compile``'s
tracing), so two models in one process launch as their own tiers say. A captured CUDA graph keeps
the launches it captured (a change of the tier drops the graphs). It changes no number: the same
kernels run in the same order on the same data (the GPU test compares seeds).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

try:  # the kernels' modules import this one, so it finds Triton itself
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - depends on the installation
    HAVE_TRITON = False

#: whether the kernels launched now are launched dependent: set for the length of a call from the
#: model's tier (:func:`launched_dependent`), never shared between models
_LAUNCH = contextvars.ContextVar("petri_dependent_launch", default=False)


def dependent_launch_reason(device) -> str | None:
    """``None`` when kernels on ``device`` (a ``torch.device``) can be launched dependent, else why
    not: it needs CUDA on a GPU of compute capability 9.0 or newer (Hopper) and a Triton with the
    grid dependency control instructions (3.3 or newer)."""
    import torch

    if device.type != "cuda" or not HAVE_TRITON:
        return "dependent launch needs CUDA and Triton"
    if torch.cuda.get_device_capability(device) < (9, 0):
        return "dependent launch needs a GPU of compute capability 9.0 or newer (Hopper)"
    if not _GRID_CONTROL:
        return f"dependent launch needs Triton 3.3 or newer (this is {triton.__version__})"
    return None


@contextlib.contextmanager
def launched_dependent(enabled: bool):
    """Within the block petri's kernels are launched dependent (``enabled``) or as before; the
    setting of the block around it returns after."""
    token = _LAUNCH.set(bool(enabled))
    try:
        yield
    finally:
        _LAUNCH.reset(token)


def as_the_tier_says(function):
    """``function(lm, ...)`` run :func:`launched_dependent` as ``lm``'s tier says
    (:attr:`petri.engine.fast_tier.FastTier.dependent_launch`)."""

    @functools.wraps(function)
    def launched_as_the_tier_says(lm, *args, **kwargs):
        with launched_dependent(lm.fast_tier.dependent_launch):
            return function(lm, *args, **kwargs)

    return launched_as_the_tier_says


def dependent_launch_used() -> bool:
    """Whether a kernel launched now is launched dependent."""
    return _LAUNCH.get()


def launch_options() -> dict:
    """The keyword arguments a launch of a petri kernel adds: its ``PDL`` constexpr and, launched
    dependent, Triton's ``launch_pdl`` (otherwise only ``PDL=False``: the launch is what it was)."""
    return {"PDL": True, "launch_pdl": True} if _LAUNCH.get() else {"PDL": False}


if HAVE_TRITON:
    _GRID_CONTROL = hasattr(getattr(tl.extra, "cuda", None), "gdc_wait")

    if _GRID_CONTROL:

        @triton.jit
        def wait_then_release(PDL: tl.constexpr):
            """Wait for the kernel before to complete, then let the kernel after launch (``PDL``)."""
            if PDL:
                tl.extra.cuda.gdc_wait()
                tl.extra.cuda.gdc_launch_dependents()

    else:  # an older Triton: never launched dependent (dependent_launch_reason), so nothing to wait for

        @triton.jit
        def wait_then_release(PDL: tl.constexpr):
            """Nothing: this Triton has no grid dependency control."""
            pass
else:
    _GRID_CONTROL = False
