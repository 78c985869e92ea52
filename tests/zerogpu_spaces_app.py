"""petri's real server (:func:`petri.web.server.main`, what ``app.py`` runs) as a ZeroGPU Space with the
real ``spaces`` package, on a machine without a GPU (tests/web/test_zerogpu_spaces.py starts it).

    SPACES_ZERO_GPU=true SPACES_ZERO_DEVICE_API_URL=http://… python tests/zerogpu_spaces_app.py --tiny-random …

Everything of ``spaces`` runs as on a Space (its torch patching in this process, the start-up that
packs and reports, its scheduling through the device API, its forked worker, its pickling queues,
the Gradio request context it reads the quota token from) except the two functions that need an
NVIDIA card, replaced here (and, on a CPU wheel of torch, three attributes of the CUDA wheels that
``spaces`` reads at import are filled in: ``torch.version.cuda``, ``torch._C._cuda_init``, and a
picklable ``torch.cuda._is_in_bad_fork``): ``spaces.zero.torch.init`` (sets ``CUDA_VISIBLE_DEVICES`` to the
scheduled GPU, then makes a tensor on it) and ``spaces.zero.torch.move`` (copies the tensors the
main process put on ``cuda`` to the card). The stand-ins set the variable and check that nothing
was put on ``cuda`` (the model is served on the CPU here, and each call places it on the CPU: there
is no card to place it on), and append ``init PID UUID`` to the file
``PETRI_STANDIN_LOG`` names, so the test sees which process the GPU work ran in.
"""

from __future__ import annotations

import os
import sys

import torch


def _cuda_init() -> None:
    """What a CPU wheel of torch does when CUDA is asked for."""
    raise RuntimeError("Torch not compiled with CUDA enabled")


def _is_in_bad_fork() -> bool:
    """A CPU wheel's ``torch.cuda._is_in_bad_fork`` is a lambda, which ``spaces`` cannot pickle; the answer is the same."""
    return False


if torch.version.cuda is None:  # a CPU wheel: three attributes of the CUDA wheels that spaces reads at import
    torch.version.cuda = "13.0"  # type: ignore[misc]  # only chooses the shape of its emulated memory stats
    torch._C._cuda_init = _cuda_init  # saved, then replaced by its own guard, while patched
    torch.cuda._is_in_bad_fork = _is_in_bad_fork  # asked in a forked process at import (never initialised here)

import spaces  # noqa: E402, F401  (first, as on a Space: its torch patch before anything loads a model)
from spaces.zero import torch as zero_torch  # noqa: E402


def init(nvidia_uuid: str) -> None:
    """``spaces.zero.torch.init`` without the card: the scheduled GPU is named, nothing is made on it."""
    os.environ["CUDA_VISIBLE_DEVICES"] = nvidia_uuid
    with open(os.environ["PETRI_STANDIN_LOG"], "a") as log:
        log.write(f"init {os.getpid()} {nvidia_uuid}\n")


def move(callback=None) -> None:
    """``spaces.zero.torch.move`` without the card: there must be nothing to move."""
    assert zero_torch.size() == 0, "the main process put tensors on cuda: this stand-in cannot move them"


zero_torch.init = init
zero_torch.move = move

if __name__ == "__main__":
    from petri.engine.torch.card_placement import CardPlacement
    from petri.web import gpu_executor
    from petri.web.server import main

    # no card: each GPU call places the model where it is, on the CPU (as the fork harness does)
    gpu_executor.zerogpu_placement = lambda lm, size="xlarge": CardPlacement("cpu")  # type: ignore[assignment]

    sys.exit(main(sys.argv[1:]))
