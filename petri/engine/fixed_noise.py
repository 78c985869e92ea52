"""Sampling with the noise taken out, so that two backends can be driven identically.

Random numbers differ between frameworks (torch's and MLX's generators share nothing), so backend
parity is proven on a run whose three random draws are replaced by fixed inputs:

- the initial canvas (normally uniform random tokens) is given;
- the denoiser's multinomial draw becomes the argmax of the temperature-scaled distribution;
- the renoise tokens of step ``t`` (normally fresh uniform tokens) come from a fixed stream.

Everything else (self-conditioning, temperature schedule, entropy-bounded acceptance, anchors,
adaptive stop, logging) runs unchanged. numpy only: usable from any backend and from tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FixedNoise:
    """A noise-free drive: ``initial_canvas`` (S, L) and ``renoise`` (T, S, L) token ids.

    Anchors are still written over both, as the sampler always does. Step ``t`` renoises from
    ``renoise[t]``; a run longer than ``T`` steps raises.
    """

    initial_canvas: np.ndarray
    renoise: np.ndarray

    def __post_init__(self) -> None:
        canvas, renoise = np.asarray(self.initial_canvas), np.asarray(self.renoise)
        if canvas.ndim != 2 or renoise.ndim != 3 or renoise.shape[1:] != canvas.shape:
            raise ValueError(
                f"FixedNoise needs initial_canvas (S, L) and renoise (T, S, L); got {canvas.shape} and {renoise.shape}"
            )

    @classmethod
    def from_seed(cls, seed: int, batch: int, length: int, vocab_size: int, steps: int) -> FixedNoise:
        """Uniform tokens drawn once with numpy (the same on every backend)."""
        rng = np.random.default_rng(seed)
        return cls(
            initial_canvas=rng.integers(0, vocab_size, (batch, length), dtype=np.int64),
            renoise=rng.integers(0, vocab_size, (steps, batch, length), dtype=np.int64),
        )

    def check_batch(self, batch: int, length: int) -> None:
        """Raise ``ValueError`` unless the start canvas is (``batch``, ``length``)."""
        shape = np.asarray(self.initial_canvas).shape
        if shape != (batch, length):
            raise ValueError(f"fixed_noise.initial_canvas has shape {shape}, expected {(batch, length)}")

    def renoise_tokens(self, step: int) -> np.ndarray:
        if step >= len(self.renoise):
            raise IndexError(f"FixedNoise holds renoise tokens for {len(self.renoise)} steps; step {step} was asked")
        return np.asarray(self.renoise[step])
