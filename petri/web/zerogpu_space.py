"""What a ZeroGPU Space needs from the ``spaces`` package at start-up, given that petri mounts its
Gradio UI inside FastAPI under uvicorn and never calls ``gr.Blocks.launch()``.

Read in ``spaces`` 0.51.3 (``spaces/zero/__init__.py``, ``spaces/zero/gradio.py``): imported on
ZeroGPU (``SPACES_ZERO_GPU``), ``spaces`` patches torch (``cuda`` tensors made in the main process
are CPU tensors behind a fake ``cuda`` device) and wraps ``gr.Blocks.launch`` so that the first
``launch()`` first runs its ``startup()``: it **packs** every tensor put on ``cuda`` to disk
(``ZEROGPU_OFFLOAD_DIR``, by default ``~/.zerogpu/tensors``; a forked GPU child copies the pack to
the card), picks ``xlarge`` as the default size when the pack is larger than the card's threshold
(45,097,156,608 bytes on the RTX Pro 6000 configuration), and **reports start-up** to the platform's
device API (``POST /startup-report``). A server that never calls ``launch()`` never runs it.

:func:`prepare_spaces` imports ``spaces`` before anything loads a model (its torch patch must be in
place first; it refuses to import after CUDA was initialised). :func:`run_spaces_startup` runs that
``startup()`` itself, once the app and its ``spaces.GPU`` functions exist and before uvicorn serves,
and puts ``gr.Blocks.launch`` back (a later ``launch()`` would run it again, and packing starts by
deleting the offload folder). Off ZeroGPU, or without ``spaces``, both do nothing.
"""

from __future__ import annotations

from types import ModuleType

from petri.web.gpu_executor import on_zero_gpu


def prepare_spaces() -> ModuleType | None:
    """On ZeroGPU, ``import spaces`` (before any model is loaded), returning it; else None."""
    if not on_zero_gpu():
        return None
    try:
        import spaces
    except ImportError:
        return None
    return spaces


def run_spaces_startup() -> bool:
    """On ZeroGPU, run ``spaces``' start-up (pack the ``cuda`` tensors, report to the device API)
    that its wrapped ``gr.Blocks.launch`` would run, and unwrap ``launch``; True if it ran."""
    if prepare_spaces() is None:
        return False
    from spaces import zero

    startup = getattr(zero, "startup", None)
    if startup is None:  # a spaces without the start-up hook this was written against
        return False
    startup()
    import gradio as gr
    from spaces.zero import gradio as zero_gradio

    original = getattr(zero_gradio, "_orig_launch", None)
    if original is not None:
        gr.Blocks.launch = original  # type: ignore[method-assign]
    return True
