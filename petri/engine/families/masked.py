"""Masked diffusion, the second model family: BERT-style masked LMs (anything ``AutoModelForMaskedLM``
loads: BERT, RoBERTa, ModernBERT) and, with ``trust_remote_code``, LLaDA / Dream checkpoints.

The canvas starts as the mask token; anchors (and the canvas prefix) are given tokens that are
never masked. Each step the model reads prompt + canvas (one bidirectional sequence, no cache) and
predicts every position; the confidence of a masked position is the probability of its predicted
token, and the most confident masked positions of the current block are unmasked (LLaDA's
low-confidence remasking, arXiv 2502.09992, Algorithm 5): either a per-step budget (the block's
masked count spread evenly over its steps, the remainder to the first steps) or, with
``unmask_threshold``, every masked position at least that confident (at least one per step).
Unmasked tokens stay. ``block_length`` splits the canvas into blocks unmasked left to right (with
the budget the steps split evenly between them; with the threshold each sample works on its first
block that still has a masked position, and a canvas not unmasked within ``max_denoising_steps``
keeps mask tokens); ``None`` is one block. ``temperature`` > 0 draws the predicted
token by Gumbel-max (argmax of logits + temperature · Gumbel noise, LLaDA's ``add_gumbel_noise``);
0 is the argmax.

The record is DiffusionGemma's: the raw argmax of the logits at every canvas position (masked or
not, before anything is forced), the entropy of softmax(logits), and accepted = unmasked at this
step. A sample finishes when nothing of its canvas is masked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from petri.core.cancel import CancelToken
from petri.core.trajectory import MASKED_FAMILY, MaskedSettings, Trajectory, block_count, blocks_problem
from petri.engine.base import EngineFacts, SampleRequest, StepCallback, StepRead, engine_facts, prompt_room
from petri.engine.checkpoints import weights_fingerprint
from petri.engine.families.registry import get_family
from petri.engine.loop import RecordedStepper, read_steps, run_loop
from petri.engine.torch.array_ops import TorchOps, token_entropy

FAMILY = MASKED_FAMILY
DEFAULT_CANVAS_LENGTH = 64


def transfer_counts(masked: torch.Tensor, steps: int) -> torch.Tensor:
    """LLaDA's ``get_num_transfer_tokens``: per sample, ``masked`` (S,) tokens spread over ``steps``
    steps, the remainder to the first steps → (S, steps) int64."""
    base = masked // steps
    remainder = masked % steps
    counts = base[:, None].repeat(1, steps)
    counts += torch.arange(steps, device=masked.device)[None, :] < remainder[:, None]
    return counts


class MaskedDiffusionScheduler:
    """Low-confidence remasking over a batch of canvases (S, L): state ``canvas`` (= ``final_ids``),
    ``finished`` (S,). ``model_input`` is ``None`` (the model reads only the canvas)."""

    def __init__(self, settings: MaskedSettings, mask_id: int, anchor_mask: torch.Tensor, anchor_ids: torch.Tensor):
        batch, length = anchor_mask.shape
        if (settings.block_length or length) < 1:
            raise ValueError(f"block_length must be at least 1, got {settings.block_length}")
        problem = blocks_problem(settings, length)  # the check a request's settings pass (MaskedSettings.CHECKS)
        if problem:
            raise ValueError(problem)
        self.blocks, block = block_count(settings, length)
        self.settings, self.mask_id, self.block = settings, mask_id, block
        self.steps_per_block = settings.max_denoising_steps // self.blocks
        budgeted = settings.unmask_threshold is None
        self.max_steps = self.steps_per_block * self.blocks if budgeted else settings.max_denoising_steps
        self.can_stop = True
        self.canvas = torch.where(anchor_mask, anchor_ids, torch.full_like(anchor_ids, mask_id))
        self.finished = ~(self.canvas == mask_id).any(-1)
        self.model_input = None
        self.positions = torch.arange(length, device=anchor_mask.device)
        self.counts: torch.Tensor | None = None

    @property
    def final_ids(self) -> torch.Tensor:
        return self.canvas

    def step(self, logits: torch.Tensor, index: int):
        """(S, L, V) logits over the canvas → (raw argmax, entropy, accepted), each (S, L)."""
        logits = logits.float()
        raw_argmax = torch.argmax(logits, dim=-1)
        entropy = token_entropy(logits)
        masked = self.canvas == self.mask_id
        threshold = self.settings.unmask_threshold
        if threshold is None:  # the blocks in turn, each with its share of the steps
            block, within = divmod(index, self.steps_per_block)
            in_block = (self.positions // self.block == block)[None, :]
            if within == 0:  # a block starts: its budget per step, from its masked count
                self.counts = transfer_counts((masked & in_block).sum(-1), self.steps_per_block)
        else:  # per sample, the first block that still has a masked position
            first = torch.where(masked, self.positions, self.positions.numel()).min(-1).values
            in_block = self.positions[None, :] // self.block == (first // self.block)[:, None]
        temperature = self.settings.temperature
        if temperature > 0:
            uniform = torch.rand_like(logits, dtype=torch.float64)
            predicted = torch.argmax(logits.double() - temperature * torch.log(-torch.log(uniform)), dim=-1)
        else:
            predicted = raw_argmax
        probs = torch.softmax(logits.double(), dim=-1)
        confidence = torch.gather(probs, -1, predicted[..., None])[..., 0]
        candidate = masked & in_block
        confidence = torch.where(candidate, confidence, -torch.inf)
        accepted = torch.zeros_like(masked)
        for s in range(confidence.shape[0]):
            available = int(candidate[s].sum())
            if threshold is None:
                k = int(cast(torch.Tensor, self.counts)[s, within])  # set with the block (no threshold)
            else:
                k = max(1, int((confidence[s] >= threshold).sum())) if available else 0
            k = min(k, available)
            if k:
                accepted[s, torch.topk(confidence[s], k).indices] = True
        self.canvas = torch.where(accepted, predicted, self.canvas)
        self.finished = ~(self.canvas == self.mask_id).any(-1)
        return raw_argmax, entropy, accepted

    def state(self) -> list:
        return [self.canvas, self.finished]


def _masked_forward(model, prompt: torch.Tensor, shift_logits: bool):
    """``forward(canvas, _) → logits (S, L, V)`` of the canvas positions of prompt + canvas, read
    as one sequence (Dream's logits are shifted one to the right: ``shift_logits``)."""

    def forward(canvas: torch.Tensor, _unused) -> torch.Tensor:
        sequence = torch.cat([prompt.expand(canvas.shape[0], -1), canvas], dim=1)
        logits = model(input_ids=sequence).logits
        if shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits[:, prompt.shape[1]:]

    return forward


@dataclass
class MaskedLoadedModel:
    """A masked-diffusion model ready to sample from (the :class:`~petri.engine.base.SamplingModel`
    protocol): ``mask_token_id`` starts every free canvas position; ``canvas_length`` is the
    checkpoint config's ``canvas_length`` when it has one, else 64."""

    model: torch.nn.Module
    tokenizer: object
    model_id: str
    device: torch.device
    dtype: torch.dtype
    mask_token_id: int
    canvas_length: int = DEFAULT_CANVAS_LENGTH
    shift_logits: bool = False
    backend: str = "torch"
    family = FAMILY
    tier = "masked"

    @property
    def vocab_size(self) -> int:
        return int(cast(Any, self.model).config.vocab_size)

    @property
    def architecture(self) -> str:
        return type(self.model).__name__

    @property
    def device_type(self) -> str:
        return self.device.type

    @property
    def max_positions(self) -> int | None:
        value = getattr(self.model.config, "max_position_embeddings", None)
        return value if isinstance(value, int) and value > 0 else None

    @property
    def max_prompt_length(self) -> int | None:
        return prompt_room(self.max_positions, self.canvas_length)

    def default_settings(self) -> MaskedSettings:
        """:class:`MaskedSettings`' defaults, with ``max_denoising_steps`` / ``block_length`` /
        ``unmask_threshold`` from the checkpoint config's ``petri_sampler`` dict when it has one."""
        given = getattr(self.model.config, "petri_sampler", None) or {}
        known = {"max_denoising_steps", "block_length", "unmask_threshold", "temperature"}
        return MaskedSettings(**{k: v for k, v in dict(given).items() if k in known})

    def describe(self) -> dict[str, str | int]:
        return {"model_id": self.model_id, "device": str(self.device), "dtype": str(self.dtype).removeprefix("torch."),
                "canvas_length": self.canvas_length, "vocab_size": self.vocab_size}

    def facts(self) -> EngineFacts:
        """:class:`~petri.engine.base.EngineFacts` (no prompt encoder: nothing kept)."""
        return engine_facts(self, self.architecture, None)

    def fingerprint(self) -> str:
        return weights_fingerprint(self.model, self.dtype)

    def eager_stepper(self, request: SampleRequest) -> tuple[RecordedStepper, np.ndarray]:
        """Seed, pins and the stepper (this model's forward and its family's step), ready for step 0:
        (stepper, pinned mask (S, L) bool on the host). :meth:`sample` and :meth:`read_steps` drive it."""
        from petri.core.dish import pinned_arrays

        family = get_family(self.family)
        settings = request.settings
        if not isinstance(settings, family.settings):
            settings = family.settings(**{k: v for k, v in settings.to_dict().items()
                                          if k in family.settings.__dataclass_fields__})
        if request.seed is not None:
            torch.manual_seed(request.seed)
        pinned_mask, pinned_ids = pinned_arrays(request.layouts, request.canvas_prefix, self.canvas_length)
        ops = TorchOps(self.device)
        anchor_mask, anchor_ids = ops.mask(pinned_mask), ops.tokens(pinned_ids)
        prompt = ops.tokens([list(request.prompt_ids)])
        scheduler = family.scheduler()(settings, self.mask_token_id, anchor_mask, anchor_ids)
        stepper = RecordedStepper(ops, _masked_forward(self.model, prompt, self.shift_logits), scheduler,
                                  len(request.layouts))
        return stepper, pinned_mask

    @torch.no_grad()
    def read_steps(self, request: SampleRequest, steps: int, on_read: StepRead, *,
                   cancel: CancelToken | None = None) -> None:
        """:meth:`~petri.engine.base.SteppedModel.read_steps` over :meth:`eager_stepper` (what the
        probe reads, :mod:`petri.engine.probe`)."""
        read_steps(self.eager_stepper(request)[0], steps, on_read, cancel)

    @torch.no_grad()
    def sample(self, request: SampleRequest, *, on_step: StepCallback | None = None,
               cancel: CancelToken | None = None) -> Trajectory:
        """The loop (:func:`petri.engine.loop.run_loop`) over the step of this model's family, its
        registration's ``step`` (:class:`MaskedDiffusionScheduler`; a family built on masked LMs
        registers its own, ``(settings, mask_id, anchor_mask, anchor_ids)`` like this one). Settings
        of another family give the fields the two share."""
        started = time.perf_counter()
        stepper, pinned_mask = self.eager_stepper(request)
        encoded = time.perf_counter()
        return run_loop(stepper, lm=self, request=request, pinned_mask=pinned_mask, sampler=self.tier,
                        started=started, encoded=encoded, on_step=on_step, cancel=cancel)


def load_masked_model(folder: str | Path, model_id: str, device: torch.device, dtype: torch.dtype,
                      trust_remote_code: bool = False, canvas_length: int | None = None) -> MaskedLoadedModel:
    """Load a masked LM checkpoint (a local folder) for sampling. ``AutoModelForMaskedLM`` for the
    architectures transformers has; with ``trust_remote_code`` (LLaDA, Dream) the checkpoint's own
    code through ``AutoModel`` when it has no masked-LM class. Raises ``ValueError`` when neither
    the tokenizer nor the config names a mask token."""
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    source = str(folder)
    config = AutoConfig.from_pretrained(source, local_files_only=True, trust_remote_code=trust_remote_code)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True, trust_remote_code=trust_remote_code)
    try:
        model = AutoModelForMaskedLM.from_pretrained(source, local_files_only=True, dtype=dtype,
                                                     trust_remote_code=trust_remote_code)
    except ValueError:
        if not trust_remote_code:
            raise
        model = AutoModel.from_pretrained(source, local_files_only=True, dtype=dtype, trust_remote_code=True)
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_id is None:
        mask_id = getattr(config, "mask_token_id", None)
    if mask_id is None:
        raise ValueError(f"model {model_id!r}: mask_token_id: neither its tokenizer nor its config names a mask "
                         "token, which masked diffusion starts every canvas position from")
    length = canvas_length or getattr(config, "canvas_length", None) or DEFAULT_CANVAS_LENGTH
    model.to(device).eval()
    return MaskedLoadedModel(model=model, tokenizer=tokenizer, model_id=model_id, device=device, dtype=dtype,
                             mask_token_id=int(mask_id), canvas_length=int(length),
                             shift_logits=getattr(config, "model_type", "") == "Dream")

