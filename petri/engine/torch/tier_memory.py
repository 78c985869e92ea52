"""How much GPU memory each tier of a DiffusionGemma needs, and which tier fits a card (issue 62).

Before a model loads on CUDA, :func:`plan_tier` counts the checkpoint's parameters on the meta device
(:func:`weight_counts`: no storage), estimates each tier's peak (:func:`estimate`: weights + a
workspace for the shape) and compares it with the card's free memory. A tier that does not fit is
never started (no CUDA out-of-memory error midway): an FP8 tier that would fit with its bf16 copies
released runs released (:attr:`Tier.released`: the decoder's bf16 matrices freed once quantized, so
the prompt encoder, which shares them, runs in FP8 too: ``+enc-fp8``; the copies are made before the
bf16 matrices are freed, so the kept tier's weights must fit for a moment); anything else is refused with
a :class:`TierMemoryError` naming the memory the tier needs, what the card has and the fastest tier
that fits.

Weights (bytes): every parameter and buffer in the model's dtype (``W``); the FP8 tier adds one byte
per quantized element (the decoder's linears but the routers, its self-conditioning MLP, the LM head,
the experts' gate/up and down: ``Q``), a float32 scale per quantized row and the embedding's
transposed FP8 copy (V × H bytes, the FP8 self-conditioning's); released, it drops the bf16 bytes of
every quantized matrix but the LM head (which is the token embedding). For the full-size
architecture (``experiments/bench.py``'s config): W = 47.03 GiB (25.25 B parameters), the FP8 copies
23.5 GiB, released 45.6 GiB (``tests/engine/test_tier_memory.py`` counts them).

Workspace for ``batch`` samples and a ``prompt``-token prompt: ``base + logits_factor × B·L·V·4 +
per_prompt_token × P`` (L the canvas, V the vocabulary: the float32 logits of one step), with
per-tier coefficients (:data:`WORKSPACE`) set to bound the peaks ``torch.cuda.max_memory_allocated``
measured for the full-size architecture on an H200 (``experiments/results/bench_h200_*.json``,
every tier at 1 × 1,600, 12 × 200 and 1 × 4,096; the test checks each against the estimate). The
card's figure is ``torch.cuda.mem_get_info``'s free memory less :data:`RESERVE_GIB` and
:data:`RESERVE_FRACTION` of the card (the allocator's fragmentation, cuBLAS and Triton workspaces).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GIB = 2**30
#: the shape a load plans for: a seed's or study's default 12 samples, a prompt of up to 1,600 tokens
PLANNING_SHAPE = (12, 1600)
RESERVE_GIB, RESERVE_FRACTION = 1.0, 0.02
#: what the FP8 self-conditioning (+sc-fp8) added to the compiled FP8 tier's peak on the H200 (1 × 1,600:
#: 78.4 GiB against 74.3; measured, its cause not taken apart)
SC_FP8_GIB = 4.2
#: (compiled, fp8) → (base GiB, logits factor, MiB per prompt token): see the module docstring
WORKSPACE = {
    (True, False): (0.6, 1.65, 0.66),
    (False, False): (0.6, 4.5, 0.66),
    (True, True): (2.1, 1.65, 0.66),
    (False, True): (2.1, 4.5, 0.66),
}


@dataclass(frozen=True)
class WeightCounts:
    """A model's sizes: ``weight_bytes`` (every parameter and buffer, each once), ``quantized`` (the
    elements the FP8 tier quantizes), ``quantized_rows`` (their rows: one float32 scale each),
    ``lm_head`` (the LM head's elements, among ``quantized``; tied to the embedding, never
    released), ``element_bytes`` (of the model's dtype), ``vocab``, ``hidden``, ``canvas``."""

    weight_bytes: int
    quantized: int
    quantized_rows: int
    lm_head: int
    element_bytes: int
    vocab: int
    hidden: int
    canvas: int


@dataclass(frozen=True)
class Tier:
    """compiled: the compiled tier (``--compile``); precision: ``bf16``, ``fp8`` or ``fp8-fast``;
    released: the FP8 tier without the bf16 copies of what it quantized (the encoder in FP8);
    sc_fp8: the FP8 self-conditioning (``+sc-fp8``); fp8_encoder: the encoder in FP8 as asked
    (``+enc-fp8``; always so where released)."""

    compiled: bool
    precision: str = "bf16"
    released: bool = False
    sc_fp8: bool = False
    fp8_encoder: bool = False

    @property
    def fp8(self) -> bool:
        return self.precision != "bf16"

    @property
    def precision_text(self) -> str:
        """``--precision``'s text for this tier (:mod:`petri.engine.precision_choice`)."""
        return (self.precision + ("+sc-fp8" if self.sc_fp8 else "")
                + ("+enc-fp8" if self.released or self.fp8_encoder else ""))

    @property
    def options(self) -> str:
        """The command-line options that ask for this tier."""
        return f"--{'' if self.compiled else 'no-'}compile --precision {self.precision_text}"


@dataclass(frozen=True)
class Estimate:
    weights: int  # bytes
    workspace: int  # bytes

    @property
    def total(self) -> int:
        return self.weights + self.workspace


class TierMemoryError(ValueError):
    """A tier that does not fit the card, refused before it starts (the message says why)."""


def weight_counts(model) -> WeightCounts:
    """:class:`WeightCounts` of a ``DiffusionGemmaForBlockDiffusion`` (on the meta device or any
    other; the encoder shares the decoder's layers, so each tensor counts once)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    decoder = model.model.decoder
    targets = [m.weight for n, m in decoder.layers.named_modules()
               if isinstance(m, torch.nn.Linear) and ".router." not in f".{n}."]
    sc = getattr(decoder, "self_conditioning", None)
    targets += [m.weight for m in (sc.modules() if sc is not None else ()) if isinstance(m, torch.nn.Linear)]
    for layer in decoder.layers:
        experts = getattr(layer, "experts", None)
        if experts is not None:
            targets += [experts.gate_up_proj, experts.down_proj]
    targets.append(model.lm_head.weight)
    unique = {id(t): t for t in targets}.values()
    config = model.config
    return WeightCounts(
        weight_bytes=sum(t.numel() * t.element_size() for t in tensors.values()),
        quantized=sum(t.numel() for t in unique),
        quantized_rows=sum(t.numel() // t.shape[-1] for t in unique),
        lm_head=model.lm_head.weight.numel(),
        element_bytes=model.lm_head.weight.element_size(),
        vocab=int(config.text_config.vocab_size),
        hidden=int(config.text_config.hidden_size),
        canvas=int(config.canvas_length),
    )


def estimate(counts: WeightCounts, tier: Tier, batch: int, prompt: int) -> Estimate:
    """The tier's peak GPU memory at ``batch`` samples and a ``prompt``-token prompt (module docstring)."""
    weights = counts.weight_bytes
    if tier.fp8:
        weights += counts.quantized + 4 * counts.quantized_rows + counts.vocab * counts.hidden
        if tier.released:
            weights -= counts.element_bytes * (counts.quantized - counts.lm_head)
    base, logits_factor, per_token = WORKSPACE[(tier.compiled, tier.fp8)]
    logits = batch * counts.canvas * counts.vocab * 4
    workspace = (base + (SC_FP8_GIB if tier.sc_fp8 else 0.0)) * GIB + logits_factor * logits + per_token * 2**20 * prompt
    return Estimate(weights=int(weights), workspace=int(workspace))


def usable(free: int, total: int) -> int:
    """The bytes a plan may count on: the card's free memory less the reserve (module docstring)."""
    return int(free - RESERVE_GIB * GIB - RESERVE_FRACTION * total)


def candidates(compile_ok: bool) -> list[Tier]:
    """Every tier, fastest first (as measured on an H200, docs/performance.md)."""
    tiers = [Tier(True, "fp8-fast"), Tier(True, "fp8"), Tier(True, "bf16"), Tier(False, "fp8"), Tier(False, "bf16")]
    tiers = [t for t in tiers if compile_ok or not t.compiled]
    return [variant for t in tiers for variant in ((t, Tier(t.compiled, t.precision, True)) if t.fp8 else (t,))]


def fits(counts: WeightCounts, tier: Tier, shape: tuple[int, int], room: int) -> bool:
    """Whether ``tier`` fits ``room`` bytes at ``shape``; a released tier also while it is made (its
    FP8 copies are made beside the bf16 weights, which are freed after: the kept tier's weights)."""
    if estimate(counts, tier, *shape).total > room:
        return False
    return not tier.released or estimate(counts, Tier(tier.compiled, tier.precision), 1, 0).weights <= room


def choose_tier(counts: WeightCounts, free: int, total: int, *, compile: bool | None, precision: str = "bf16",
                compile_ok: bool = True, shape: tuple[int, int] = PLANNING_SHAPE, device: str = "cuda") -> Tier:
    """The tier to load: ``compile`` ``None`` (not named) takes the compiled tier where it fits and
    ``compile_ok`` (CUDA with Triton), else the exact one; a named one as named. ``precision``:
    ``--precision``'s text; an FP8 tier that fits only released runs released. Raises
    :class:`TierMemoryError` when the tier asked for fits ``usable(free, total)`` at ``shape`` (batch,
    prompt tokens) in no form, naming what it needs, what the card has and the fastest tier that fits."""
    from petri.engine.precision_choice import parse_precision

    choice = parse_precision(precision)
    room = usable(free, total)
    batch, prompt = shape
    fp8 = choice.precision != "bf16"
    asked = [Tier(c, choice.precision, r, choice.fp8_self_conditioning, choice.fp8_encoder)
             for c in ((compile_ok, False) if compile is None else (bool(compile),))
             for r in ((False, True) if fp8 else (False,))]
    asked = [t for t in dict.fromkeys(asked) if t.compiled or not t.sc_fp8]
    if not asked:  # +sc-fp8 without the compiled tier: not a memory question; the FP8 tier refuses it, naming why
        return Tier(False, choice.precision, False, choice.fp8_self_conditioning, choice.fp8_encoder)
    for tier in asked:
        if fits(counts, tier, shape, room):
            return tier
    first = min(asked, key=lambda t: estimate(counts, t, batch, prompt).total)  # the least it could need
    need = estimate(counts, first, batch, prompt)
    fitting = [t for t in candidates(compile_ok) if fits(counts, t, shape, room)]
    advice = (f"the fastest tier that fits: {fitting[0].options} (about "
              f"{estimate(counts, fitting[0], batch, prompt).total / GIB:.1f} GiB)" if fitting
              else "no tier fits this card: use a larger GPU, or fewer samples or a shorter prompt")
    raise TierMemoryError(
        f"{first.options} needs about {need.total / GIB:.1f} GiB of GPU memory for {batch} samples with a "
        f"{prompt:,}-token prompt (weights {need.weights / GIB:.1f} GiB + workspace {need.workspace / GIB:.1f} GiB); "
        f"{device} has {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB, {room / GIB:.1f} GiB usable; {advice}")


def card_memory(device) -> tuple[int, int]:
    """(free, total) bytes of the CUDA ``device`` (``torch.cuda.mem_get_info``)."""
    return torch.cuda.mem_get_info(torch.device(device))


def checkpoint_counts(source: str, dtype: torch.dtype = torch.bfloat16) -> WeightCounts:
    """:func:`weight_counts` of the DiffusionGemma checkpoint ``source`` (a folder or a cached hub
    id; only its config is read) built on the meta device in ``dtype``."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    config = DiffusionGemmaConfig.from_pretrained(source, local_files_only=True)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            return weight_counts(DiffusionGemmaForBlockDiffusion(config))
    finally:
        torch.set_default_dtype(previous)


def plan_cuda_tier(name_or_path, device: str, dtype: str, compile: bool | None, precision: str) -> Tier | None:
    """The tier a DiffusionGemma checkpoint loads in on a CUDA ``device`` (:func:`choose_tier` at
    :data:`PLANNING_SHAPE` against the card's free memory), before any weight loads; ``None`` off
    CUDA or where the checkpoint's config cannot be read (the loader then names what is missing)."""
    from petri.core.paths import checkpoint_source
    from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
    from petri.engine.torch.device import resolve_device, resolve_dtype
    from petri.engine.torch.model import default_model_name

    torch_device = resolve_device(device)
    if torch_device.type != "cuda":
        return None
    name = checkpoint_source(str(name_or_path) if name_or_path is not None else default_model_name())
    try:
        counts = checkpoint_counts(name, resolve_dtype(dtype, torch_device))
    except (OSError, ValueError):
        return None
    free, total = card_memory(torch_device)
    return choose_tier(counts, free, total, compile=compile, precision=precision, compile_ok=HAVE_TRITON,
                       device=str(torch_device))
