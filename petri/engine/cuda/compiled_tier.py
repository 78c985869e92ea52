"""The compiled tier of the GPU fast path, switched on and off in place: the decoder's experts
through the fused experts op (:mod:`petri.engine.cuda.fused.fused_experts`), its routers' top-k as one op
(:mod:`petri.engine.cuda.fused.fused_router`), its projections that read one input as one product
(:mod:`petri.engine.cuda.fused.stacked_projections`), its global layers' attention
(:mod:`petri.engine.cuda.attention.split_attention`) and its other layers' at one sample
(:mod:`petri.engine.cuda.attention.sliding_attention`), its attention's norms, rotary embedding and appending to the
prompt's keys as one op (:mod:`petri.engine.cuda.attention.attention_inputs`), regional compilation of the decoder
layers and of the prompt encoder's with one graph per layer type (:mod:`petri.engine.torch.decoder_hooks`),
and the fast path's options that are not bit-exact either (:class:`petri.engine.torch.fast_tier.FastOptions`:
the self-conditioning softmax in the logits pass, the inverse-CDF draw). What it switched on is written
down in the model's tier (:class:`petri.engine.torch.fast_tier.FastTier`: the compiled layers, the
small-batch experts, the options), which is how the samplers and :func:`uncompile_regions` know."""

from __future__ import annotations

import contextlib
import functools
import logging
import os

from petri.engine.base import TorchLoadedModel
from petri.engine.cuda.attention.attention_inputs import drop_fused_attention_inputs, use_fused_attention_inputs
from petri.engine.cuda.attention.encoder_attention import use_encoder_window
from petri.engine.cuda.attention.sliding_attention import use_flash_sliding
from petri.engine.cuda.attention.split_attention import check_method, drop_split_attention, use_split_attention
from petri.engine.cuda.fp8_tier.fp8 import precision_of, set_precision
from petri.engine.cuda.fused.batch1_experts import use_small_batch_experts
from petri.engine.cuda.fused.fused_experts import fuse_experts, unfuse_experts
from petri.engine.cuda.fused.fused_norms import fuse_norms_reason, fused_norms_forward
from petri.engine.cuda.fused.fused_router import fuse_routers, unfuse_routers
from petri.engine.cuda.fused.overlapped_mlp import MLPBeside, feedforward_mlp
from petri.engine.cuda.fused.stacked_projections import stack_projections, unstack_projections
from petri.engine.torch.decoder_hooks import (
    compile_function,
    compile_layers,
    deterministic_mode_used,
    encoder_layers,
    uncompile_layers,
    writing_own_cache_layer,
)
from petri.engine.torch.fast_tier import FastOptions

log = logging.getLogger(__name__)

#: where the compiled tier keeps Inductor's caches unless TORCHINDUCTOR_CACHE_DIR says otherwise
PETRI_CACHE_DIR = os.path.expanduser("~/.cache/petri/torchinductor")


def compile_regions(lm: TorchLoadedModel, backend: str = "inductor", fused_experts: bool = True, small_batch_experts: bool = True,
                    encoder: bool = True, fused_router: bool = True, split_attention: bool = True,
                    stacked_projections: bool = True, fp8_self_conditioning: bool = False,
                    fused_norms: bool = True, overlapped_mlp: bool = True, deterministic_kernels: bool = True,
                    fused_attention_inputs: bool = True, global_attention: str = "products",
                    flash_sliding: bool = True, encoder_window: bool = True) -> None:
    """The compiled tier, in place: the decoder's experts through the fused experts op
    (``fused_experts``; skipped, with the reason logged, where the layers do not fit it), then
    regional compilation of the decoder layers (:func:`petri.engine.torch.decoder_hooks.compile_layers`:
    one graph per layer type), and the sampler's softmax of the self-conditioning and inverse-CDF
    draw (:class:`FastOptions`). Compiled artifacts go to Inductor's on-disk caches (FX graph,
    AOTAutograd and Triton kernel caches in ``TORCHINDUCTOR_CACHE_DIR``, :func:`use_petri_cache_dir`),
    which a restarted process reuses. ``small_batch_experts`` (on by default; issue 25's batch-1 lever,
    measured faster at one sample on an H200 in bf16 and FP8 and equal at twelve, where it is not
    used): calls of few tokens take :mod:`petri.engine.cuda.fused.batch1_experts`' grouped GEMM instead (in FP8
    its scaled form, :func:`petri.engine.cuda.fp8_tier.fp8.experts_fp8_small_batch`). ``encoder`` (on by default;
    issue 25): the prompt encoder's layers too, the same way (their experts through the same ops, in
    bf16 unless the FP8 tier's opt-in ``fp8_encoder`` asks for FP8, :func:`petri.engine.cuda.fp8_tier.fp8.set_precision`;
    :func:`petri.engine.torch.decoder_hooks.writing_own_cache_layer`), so a
    request's prompt pass is compiled as well. ``fused_router`` (on by default; issue 25): every
    compiled layer's router takes its softmax, top-k and scaling as one op
    (:mod:`petri.engine.cuda.fused.fused_router`). ``split_attention`` (on by default; issue 25, measured
    faster over whole seeds at one and twelve samples on an H200): the decoder's global layers attend
    through :mod:`petri.engine.cuda.attention.split_attention`, by ``global_attention``'s method: ``"products"``
    (the default since 2026-12-03: two batched products around a float32 softmax) or ``"chunks"``
    (the memory-efficient kernel over chunks of the keys, the method before). ``flash_sliding`` (on by
    default since 2026-12-04; issue 25): at one sample the other layers (head dim up to
    256) attend through the flash kernel (:mod:`petri.engine.cuda.attention.sliding_attention`) instead of SDPA's
    choice. ``encoder_window`` (on by default since 2026-12-04; issue 25): with ``encoder``, the prompt
    encoder's sliding layers attend through the flash kernel told their window instead of SDPA with
    the band mask (:mod:`petri.engine.cuda.attention.encoder_attention`). ``stacked_projections`` (on by default; issue 25):
    each decoder layer's q, k, v and its MLP's gate and up as one product each
    (:mod:`petri.engine.cuda.fused.stacked_projections`). ``fp8_self_conditioning`` (opt-in; issue 25, measured
    faster at 12 samples on an H200, its distribution shift in docs/performance-log.md): in the FP8 tier, the
    self-conditioning probabilities and their product with the embedding in e4m3
    (:class:`FastOptions`). ``fused_norms`` (on by default; issue 25, measured faster at 12 samples
    on an H200 in bf16 and fp8-fast, even at one in bf16): each decoder layer's norms between its
    attention and the next layer as two row kernels (:mod:`petri.engine.cuda.fused.fused_norms`; needs the
    fused router, left out with the reason logged where a layer does not fit). ``overlapped_mlp``
    (on by default since 2026-12-03; issue 25, measured faster at one sample in fp8-fast, even in bf16
    and at twelve; seeds give the sequential blocks' tokens since the deterministic kernels, see the
    module; off, FP8 layers run the two blocks in sequence): with the fused
    norms, in the FP8 tier, each decoder layer's dense MLP on a side CUDA stream beside its router
    and experts (:mod:`petri.engine.cuda.fused.overlapped_mlp`). ``deterministic_kernels`` (on by default; issue 25):
    every compile in Inductor's deterministic mode (:func:`petri.engine.torch.decoder_hooks.compile_function`:
    a seed's tokens then do not depend on what the process compiled or timed before; off, the
    sampler names say ``+autotuned``). ``fused_attention_inputs`` (on by default; issue 25): each
    decoder attention's q, k, v norms, rotary embedding, transposes and appending to the prompt's
    keys and values as one op (:mod:`petri.engine.cuda.attention.attention_inputs`). The FP8 tier, when
    on, is switched off around the change and on again, so that it quantizes what is installed.
    :func:`uncompile_regions` undoes it all; an unknown ``global_attention`` is a ``ValueError``
    before anything changes."""
    check_method(global_attention)
    use_petri_cache_dir()
    with _fp8_off(lm):
        uncompile_regions(lm)
        tier = lm.fast_tier
        decoder_layers = lm.model.model.decoder.layers
        left_out = _fuse_ops(lm.model, decoder_layers, fused_experts, small_batch_experts, fused_router)
        for op, reason in left_out.items():
            log.warning("fused %s off: %s", op, reason)
        # issue 25: petri.engine.cuda.fused.batch1_experts
        tier.small_batch_experts = fused_experts and small_batch_experts and "experts" not in left_out
        if split_attention:
            use_split_attention(decoder_layers, method=global_attention)
        if flash_sliding:
            use_flash_sliding(decoder_layers)
        if stacked_projections:
            stack_projections(lm, decoder_layers)
        if fused_attention_inputs:
            use_fused_attention_inputs(decoder_layers)
        forward = _fused_norms_forward(decoder_layers, fused_norms, fused_router and "router" not in left_out,
                                       overlapped_mlp, backend, deterministic_kernels)
        tier.compiled_layers = compile_layers(decoder_layers, backend, forward=forward, deterministic=deterministic_kernels)
        tier.autotuned_kernels = backend == "inductor" and not deterministic_mode_used(backend, deterministic_kernels)
        tier.overlapped_mlp = overlapped_mlp and forward is not None  # needs the fused norms
        prompt_layers = encoder_layers(lm.model) if encoder else None
        if prompt_layers is not None:
            _fuse_ops(lm.model, prompt_layers, fused_experts, small_batch_experts, fused_router)
            if encoder_window:
                use_encoder_window(prompt_layers)
            tier.compiled_encoder_layers = compile_layers(prompt_layers, backend, call=writing_own_cache_layer,
                                                          deterministic=deterministic_kernels)
        tier.set_options(FastOptions(softmax_self_conditioning=True, inverse_cdf_draw=True,
                                     fp8_self_conditioning=fp8_self_conditioning))


def _fused_norms_forward(layers, fused_norms: bool, fused_router: bool, overlapped_mlp: bool = False,
                         backend: str = "inductor", deterministic: bool = True):
    """What :func:`compile_layers` compiles for ``layers``: the fused norms' forward
    (:func:`petri.engine.cuda.fused.fused_norms.fused_norms_forward`) when asked and every layer fits (it
    needs the fused router: ``fused_router``, installed), else ``None`` (the layers' own forward),
    the reason logged. ``overlapped_mlp``: that forward with the dense MLP, compiled on its own by
    ``backend`` (one function for every layer; ``deterministic``: :func:`compile_function`), run
    beside the experts (:mod:`petri.engine.cuda.fused.overlapped_mlp`)."""
    if not fused_norms:
        if overlapped_mlp:
            log.warning("overlapped MLP off: the fused norms are off")
        return None
    reason = None if fused_router else "the fused router is off"
    reason = reason or next(filter(None, (fuse_norms_reason(layer) for layer in layers)), None)
    if reason is not None:
        log.warning("fused norms off: %s", reason)
        return None
    if overlapped_mlp:
        beside = MLPBeside(compile_function(feedforward_mlp, backend, deterministic))
        return functools.partial(fused_norms_forward, mlp_beside=beside)
    return fused_norms_forward


@contextlib.contextmanager
def _fp8_off(lm: TorchLoadedModel):
    """The FP8 tier off while open and on again after (in the precision it had): switching it on
    quantizes the layers installed by then (the stacked projections) and puts the FP8 experts
    forward over the op installed (with the tier's small-batch flag), :func:`petri.engine.cuda.fp8_tier.fp8.use_fp8`."""
    precision = precision_of(lm)
    set_precision(lm, "bf16")
    try:
        yield
    finally:
        set_precision(lm, precision)


def _fuse_ops(model, layers, fused_experts: bool, small_batch_experts: bool, fused_router: bool) -> dict[str, str]:
    """Route the experts (and, for few tokens, the small-batch experts) and the routers of ``layers``
    through petri's ops, as asked; returns why an op asked for was left out, by name
    (``"experts"``, ``"router"``)."""
    left_out = {}
    if fused_experts:
        if (reason := fuse_experts(model, layers)) is not None:
            left_out["experts"] = reason
        elif small_batch_experts:
            use_small_batch_experts(model, layers)
    if fused_router and (reason := fuse_routers(layers)) is not None:
        left_out["router"] = reason
    return left_out


def _unfuse_ops(model, layers) -> None:
    """Undo :func:`_fuse_ops` for ``layers``."""
    unfuse_experts(model, layers)
    unfuse_routers(layers)


def use_petri_cache_dir() -> None:
    """Point Inductor's caches at ``~/.cache/petri/torchinductor`` (kept across reboots) unless
    ``TORCHINDUCTOR_CACHE_DIR`` names another place. Inductor writes its own default (a folder in
    /tmp) into that variable the first time it looks, which can happen before anything is compiled
    (building a model does it), so that value counts as unset."""
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        inductor_default = os.path.abspath(default_cache_dir())
    except ImportError:  # pragma: no cover - a PyTorch without that module
        inductor_default = None
    if current is None or os.path.abspath(current) == inductor_default:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = PETRI_CACHE_DIR


def uncompile_regions(lm: TorchLoadedModel) -> None:
    """The decoder layers' own forward, experts, attention and projections again, and the default
    options (the tier's record of the compiled tier cleared); the FP8 tier stays as it was."""
    with _fp8_off(lm):
        tier = lm.fast_tier
        tier.set_options(None)  # also drops graphs captured with the other layers
        uncompile_layers(tier.compiled_layers)
        uncompile_layers(tier.compiled_encoder_layers)
        tier.compiled_layers, tier.compiled_encoder_layers = [], []
        decoder_layers = lm.model.model.decoder.layers
        _unfuse_ops(lm.model, decoder_layers)
        drop_split_attention(decoder_layers)
        drop_fused_attention_inputs(decoder_layers)
        unstack_projections(lm, decoder_layers)
        if (prompt_layers := encoder_layers(lm.model)) is not None:
            _unfuse_ops(lm.model, prompt_layers)
            drop_split_attention(prompt_layers)
        tier.small_batch_experts = tier.overlapped_mlp = tier.autotuned_kernels = False
