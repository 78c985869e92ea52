"""The torch array operations the one loop, its record and the families' schedulers run on
(:class:`TorchOps`, the torch :class:`petri.engine.loop.ArrayOps`), with the two step pieces they
name: token entropy and entropy-bounded acceptance. Below every torch step: DiffusionGemma's
(:mod:`petri.engine.torch.step`), masked diffusion's (:mod:`petri.engine.families.masked`) and the
CUDA fast path's (:mod:`petri.engine.cuda.fast_sampler`) import them from here.
"""

from __future__ import annotations

import numpy as np
import torch


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) over the last axis: (S, L, V) → (S, L); computed as
    transformers' sampler computes it, so acceptance decisions match bit for bit."""
    return torch.distributions.Categorical(logits=logits).entropy()


def accept_mask(entropy: torch.Tensor, anchor_mask: torch.Tensor, entropy_bound: float) -> torch.Tensor:
    """Entropy-bounded acceptance (arXiv 2505.24857): accept the k lowest-entropy positions with
    Σ entropy - max entropy ≤ bound. Anchors count as entropy 0, so they never use the budget.
    (S, L) float, (S, L) bool → (S, L) bool."""
    budget_entropy = torch.where(anchor_mask, torch.zeros_like(entropy), entropy)
    sorted_entropy, order = torch.sort(budget_entropy, dim=-1, descending=False)
    selected = torch.cumsum(sorted_entropy, dim=-1) - sorted_entropy <= entropy_bound
    return torch.scatter(torch.zeros_like(selected), -1, order, selected)


class TorchOps:
    """:class:`petri.engine.loop.ArrayOps` on torch tensors on ``device``; ``model_dtype`` is what
    the self-conditioning input is cast to. Random draws call ``torch.randint`` / ``torch.multinomial``
    on torch's default generator, in the order ``generate`` draws them."""

    def __init__(self, device: torch.device, model_dtype: torch.dtype = torch.float32):
        self.device, self.model_dtype = torch.device(device), model_dtype

    where = staticmethod(torch.where)
    entropy = staticmethod(token_entropy)
    accept_mask = staticmethod(accept_mask)

    def tokens(self, host) -> torch.Tensor:
        return torch.as_tensor(np.asarray(host), dtype=torch.long, device=self.device)

    def mask(self, host) -> torch.Tensor:
        return torch.from_numpy(np.asarray(host, dtype=bool)).to(self.device)

    def randint(self, high: int, shape) -> torch.Tensor:
        return torch.randint(0, high, shape, device=self.device)

    def categorical(self, logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        return torch.multinomial(probs.view(-1, probs.shape[-1]), num_samples=1).view(probs.shape[:-1])

    def argmax(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.argmax(logits, dim=-1)

    def zeros_bool(self, shape) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.bool, device=self.device)

    def ones_bool(self, shape) -> torch.Tensor:
        return torch.ones(shape, dtype=torch.bool, device=self.device)

    def zeros_int(self, shape) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.int32, device=self.device)

    def int32(self, array: torch.Tensor) -> torch.Tensor:
        return array.to(torch.int32)

    def float32(self, array: torch.Tensor) -> torch.Tensor:
        return array.float()

    def to_model_dtype(self, array: torch.Tensor) -> torch.Tensor:
        return array.to(self.model_dtype)

    def stack(self, arrays, axis: int) -> torch.Tensor:
        return torch.stack(list(arrays), dim=axis)

    def numpy(self, array: torch.Tensor) -> np.ndarray:
        return array.cpu().numpy()

    def all(self, array: torch.Tensor) -> bool:
        return bool(array.all())

    def materialize(self, *arrays) -> None:
        """Torch runs eagerly: nothing to do."""

    # the stop rule's history (threshold, S, L), updated in place (a CUDA graph may hold it)
    def full_like_history(self, threshold: int, argmax_canvas: torch.Tensor) -> torch.Tensor:
        return torch.full((threshold, *argmax_canvas.shape), -1, dtype=argmax_canvas.dtype, device=argmax_canvas.device)

    def same_as_history(self, history: torch.Tensor, argmax_canvas: torch.Tensor) -> torch.Tensor:
        return (history == argmax_canvas[None]).all(dim=-1).all(dim=0)

    def push_history(self, history: torch.Tensor, argmax_canvas: torch.Tensor) -> torch.Tensor:
        history.copy_(torch.roll(history, shifts=-1, dims=0))
        history[-1].copy_(argmax_canvas)
        return history

    def free_mean(self, entropy: torch.Tensor, anchor_mask: torch.Tensor) -> torch.Tensor:
        free = ~anchor_mask
        return (entropy * free).sum(-1) / free.sum(-1).clamp(min=1)

    def row_mean(self, entropy: torch.Tensor) -> torch.Tensor:
        return entropy.mean(dim=-1)
