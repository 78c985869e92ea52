"""The FP8 tier (issue 25, opt-in: ``--precision fp8``; never the default): the decoder's matrices in
FP8 (e4m3) with per-row scales, through PyTorch's maintained scaled matmuls.

What is quantized, once, when the tier is switched on (:func:`use_fp8`): every ``nn.Linear`` of the
decoder layers except the router (attention q/k/v/o, the dense MLP), the decoder's self-conditioning
MLP, the lm head, and the experts' gate/up and down projections. Each weight row (an output
channel) gets its own float32 scale ``amax(|row|) / 448``; activations are quantized per row (per
token) on the fly the same way. So a matrix product is

    y[m, n] = bf16( Σ_k q_x[m, k] · q_w[n, k] · s_x[m] · s_w[n] )     q_* e4m3, s_* float32

computed by ``torch._scaled_mm`` (dense, lm head) and ``torch._scaled_grouped_mm`` (experts: the
2-D rows × 3-D weights form, one group per expert; calls of few tokens where the compiled tier's
small-batch lever is on: :func:`experts_fp8_small_batch`) on CUDA (Hopper), and by a dequantize-then-
float32 reference (:func:`scaled_matmul_reference`, :func:`scaled_grouped_reference`) elsewhere.
The router, norms, attention, embedding (also the soft embeddings of the self-conditioning) and,
unless asked, the prompt encoder stay bf16: the encoder runs once per request, and keeping the bf16
weights (shared with the decoder) makes the tier reversible (:func:`use_bf16`) at the price of the
FP8 copies' memory (about half the decoder's weights again). The FP8 encoder (opt-in, issue 25:
``set_precision(lm, "fp8-fast", fp8_encoder=True)``, the tier's ``fp8_encoder``; sampler names say
``+enc-fp8``) runs the encoder layers' linears (not the routers) and experts the same way, on the
decoder's FP8 copies: the encoder's matrices are the decoder's (tied parameters), and where the
compiled tier stacked the decoder's projections each encoder linear takes its rows of the stacked
copy, which per-row scales make the same quantization as its own (:func:`use_fp8`), so it costs no
memory.

The quantized forward is installed per module (the instance's ``forward``), so the exact tier and
the compiled tier (:mod:`petri.engine.cuda.compiled_tier`, which installs its own experts op with this
tier off and switches it on again, :func:`_install_fp8_experts`) run it unchanged; every trajectory
it draws names it (``+fp8`` in the sampler field, ``-fp8`` in the device kind, so studies keep FP8
runs apart). The precision is
recorded in the model's tier (:class:`petri.engine.torch.fast_tier.FastTier`); the quantized weights
and scales live on the modules whose forward reads them.

Shapes: weights (N, K) → q (N, K) e4m3, scale (N,) float32; experts (E, N, K) → (E, N, K), (E, N);
activations (M, K) → (M, K), (M,).
"""

from __future__ import annotations

import logging
import types
from dataclasses import replace
from typing import Any

import torch

from petri.engine.base import TorchLoadedModel
from petri.engine.cuda.fp8_tier.fp8_kernels import MAX_WIDTH, gelu_gate_quantized, quantize_rows_triton, triton_quantizable
from petri.engine.cuda.fused.batch1_experts import MAX_PAIRS, align_blocks, grouped_gemm
from petri.engine.cuda.fused.fused_experts import combine_rows, fusable_reason, gated_activation, route
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.cuda.fused.stacked_projections import is_stacked_member, stacked_groups
from petri.engine.precision_choice import PRECISIONS
from petri.engine.torch.decoder_hooks import encoder_layers

log = logging.getLogger(__name__)

#: why a model whose bf16 copies were released (:mod:`petri.engine.cuda.fp8_tier.fp8_release`) cannot change tier
RELEASED_REASON = ("the bf16 weights were released to fit the FP8 tier on this card (petri.engine.cuda.fp8_tier.fp8_release); "
                   "reload the model to run another precision or tier")
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite e4m3 value
INV_FP8_MAX = 1.0 / FP8_MAX  # multiplied (in float32), not divided: the kernels do the same
#: smallest scale, so that an all-zero row quantizes to zeros instead of NaN
MIN_SCALE = 1e-12


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row e4m3 quantization of the last axis: (..., K) → q (..., K) e4m3, scale (...,) float32
    with ``x ≈ q · scale[..., None]``, scale = amax(|row|) · float32(1/448) (the row's largest value
    maps to ±448, so nothing saturates). One Triton launch where it can
    (:func:`petri.engine.cuda.fp8_tier.fp8_kernels.triton_quantizable`), else these torch ops."""
    if triton_quantizable(x):
        return quantize_rows_triton(x, INV_FP8_MAX, FP8_MAX, MIN_SCALE)
    return quantize_rows_torch(x)


def quantize_rows_torch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`quantize_rows` by torch ops (any device; what ``torch.compile`` traces)."""
    scale = (x.abs().amax(dim=-1).float() * INV_FP8_MAX).clamp(min=MIN_SCALE)
    q = (x.float() / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, scale


def activation_quantized(projected: torch.Tensor, activation: str,
                         pairs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows(gated_activation(projected, activation))``: (R, 2·I) → (R, I) e4m3, (R,);
    one fused launch for the tanh GELU on CUDA, which leaves the padding rows ``pairs`` marks (-1)
    unwritten (:func:`petri.engine.cuda.fused.fused_experts.gated_activation`)."""
    if activation == "gelu_pytorch_tanh" and projected.dtype == torch.bfloat16 and triton_quantizable(projected) \
            and projected.shape[1] // 2 <= MAX_WIDTH:
        return gelu_gate_quantized(projected, INV_FP8_MAX, FP8_MAX, MIN_SCALE, pairs)
    return quantize_rows(gated_activation(projected, activation))


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """q (..., K) e4m3, scale (...,) → float32 (..., K)."""
    return q.float() * scale.unsqueeze(-1)


def scaled_matmul_reference(xq, x_scale, wq, w_scale, dtype=torch.bfloat16) -> torch.Tensor:
    """(M, K) e4m3 · (N, K) e4m3 → (M, N) in ``dtype``, dequantized to float32 first."""
    return (dequantize(xq, x_scale) @ dequantize(wq, w_scale).T).to(dtype)


def scaled_matmul(xq, x_scale, wq, w_scale, dtype=torch.bfloat16, fast_accum: bool = False) -> torch.Tensor:
    """As :func:`scaled_matmul_reference`; on CUDA ``torch._scaled_mm`` with row-wise scales
    (scale_a (M, 1), scale_b (1, N); the weight as a column-major (K, N) view). ``fast_accum``:
    the matrix units' reduced-precision accumulation (off in the tier; ``experiments/fp8_check.py``
    times it)."""
    if xq.is_cuda:
        return torch._scaled_mm(xq, wq.T, scale_a=x_scale.unsqueeze(1), scale_b=w_scale.unsqueeze(0), out_dtype=dtype,
                                use_fast_accum=fast_accum)
    return scaled_matmul_reference(xq, x_scale, wq, w_scale, dtype)


def scaled_grouped_reference(xq, x_scale, wq, w_scale, offsets, dtype=torch.bfloat16) -> torch.Tensor:
    """Rows grouped by expert: xq (R, K), x_scale (R,), wq (E, N, K), w_scale (E, N), offsets (E,)
    int32 (each group's end) → (R, N) in ``dtype``: rows of group e times expert e, dequantized."""
    out = torch.zeros((xq.shape[0], wq.shape[1]), dtype=dtype, device=xq.device)
    start = 0
    for expert, end in enumerate(offsets.tolist()):
        if end > start:
            out[start:end] = scaled_matmul_reference(xq[start:end], x_scale[start:end], wq[expert], w_scale[expert], dtype)
        start = end
    return out


def scaled_grouped(xq, x_scale, wq, w_scale, offsets, dtype=torch.bfloat16, fast_accum: bool = False) -> torch.Tensor:
    """As :func:`scaled_grouped_reference`; on CUDA one ``torch._scaled_grouped_mm`` (no host sync)."""
    if xq.is_cuda:
        return torch._scaled_grouped_mm(xq, wq.transpose(-2, -1), x_scale, w_scale, offs=offsets, out_dtype=dtype,
                                        use_fast_accum=fast_accum)
    return scaled_grouped_reference(xq, x_scale, wq, w_scale, offsets, dtype)


def linear_product(module, xq: torch.Tensor, x_scale: torch.Tensor, dtype=torch.bfloat16) -> torch.Tensor:
    """The FP8 linear ``module``'s product (installed by :func:`use_fp8`) of rows already quantized:
    xq (M, K) e4m3, x_scale (M,) → (M, N) in ``dtype`` (:func:`scaled_matmul`).
    (A Triton kernel for few rows, the small-batch GEMM's dense form, measured about 0.6 ms per
    batch-1 step slower than ``torch._scaled_mm`` on an H200 and was taken out: issue 25's notes.)"""
    return scaled_matmul(xq, x_scale, module._petri_fp8_weight, module._petri_fp8_scale, dtype, module._petri_fp8_fast)


def _hidden_quantized(hidden: torch.Tensor, hidden_scale: torch.Tensor | None):
    """The experts' input rows in e4m3 with their scales and the dtype of the block's output: ``hidden``
    (T, H) quantized here (its own dtype out), or already e4m3 with ``hidden_scale`` (T,) (bf16 out:
    the tier's activations)."""
    if hidden_scale is None:
        return (*quantize_rows(hidden.contiguous()), hidden.dtype)
    return hidden, hidden_scale, torch.bfloat16


def experts_fp8(hidden, top_k_index, top_k_weights, gate_up_q, gate_up_scale, down_q, down_scale, activation,
                fast_accum: bool = False, hidden_scale=None):
    """The experts block in FP8: hidden (T, H), top_k_index (T, K), top_k_weights (T, K); gate_up_q
    (E, 2·I, H), gate_up_scale (E, 2·I), down_q (E, H, I), down_scale (E, H) → (T, H) in hidden's
    dtype. Transformers' algorithm (:mod:`petri.engine.cuda.fused.fused_experts`): rows sorted by expert, the
    hidden rows quantized once per token (unless they come quantized: e4m3 ``hidden`` with its
    ``hidden_scale`` (T,), then the output is bf16) and gathered with their scales, the gate/up
    grouped GEMM, ``act(gate)·up`` in bf16, quantized per row, the down grouped GEMM, the weighted
    combine in float32 (k in order)."""
    tokens, top_k = top_k_index.shape
    order, position, offsets = route(top_k_index, gate_up_q.shape[0])
    hq, h_scale, dtype = _hidden_quantized(hidden, hidden_scale)
    source = torch.div(order, top_k, rounding_mode="floor")
    rows = hq.view(torch.uint8).index_select(0, source).view(FP8)  # a byte gather: any device
    projected = scaled_grouped(rows, h_scale.index_select(0, source), gate_up_q, gate_up_scale, offsets, dtype,
                               fast_accum)
    aq, a_scale = activation_quantized(projected, activation)
    out = scaled_grouped(aq, a_scale, down_q, down_scale, offsets, dtype, fast_accum)
    return combine_rows(out, position, top_k_weights, dtype)


def experts_fp8_small_batch(hidden, top_k_index, top_k_weights, gate_up_q, gate_up_scale, down_q, down_scale,
                            activation, fast_accum: bool = False, configs=(None, None), hidden_scale=None):
    """:func:`experts_fp8` for few tokens per expert (shapes there): the two grouped GEMMs by
    :func:`petri.engine.cuda.fused.batch1_experts.grouped_gemm` (which gathers the quantized hidden rows and
    their scales itself) instead of ``torch._scaled_grouped_mm``; the same quantization, activation
    and combine. CUDA with Triton only; ``configs`` as in
    :func:`petri.engine.cuda.fused.batch1_experts.experts_small_batch`."""
    top_k = top_k_index.shape[1]
    rows, block_expert, position = align_blocks(top_k_index, gate_up_q.shape[0])
    hq, h_scale, dtype = _hidden_quantized(hidden, hidden_scale)
    projected = grouped_gemm(hq, gate_up_q, rows, block_expert, top_k, gather=True, a_scale=h_scale,
                             weight_scale=gate_up_scale, fast_accum=fast_accum, config=configs[0])
    aq, a_scale = activation_quantized(projected, activation, pairs=rows)  # padding rows: never read below
    out = grouped_gemm(aq, down_q, rows, block_expert, top_k, gather=False, a_scale=a_scale, weight_scale=down_scale,
                       fast_accum=fast_accum, config=configs[1])
    return combine_rows(out, position, top_k_weights, dtype)


@torch.library.custom_op("petri::moe_experts_fp8", mutates_args=())
def moe_experts_fp8(
    hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
    gate_up_q: torch.Tensor, gate_up_scale: torch.Tensor, down_q: torch.Tensor, down_scale: torch.Tensor,
    activation: str, fast_accum: bool = False, small_batch: bool = False, hidden_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`experts_fp8` as one op, opaque to ``torch.compile`` (like ``petri::moe_experts``);
    ``small_batch``: :func:`experts_fp8_small_batch` instead, on CUDA with Triton. ``hidden_scale``:
    ``hidden`` is already quantized (e4m3, these row scales; the output is bf16)."""
    if small_batch and hidden.is_cuda and HAVE_TRITON:
        return experts_fp8_small_batch(hidden, top_k_index, top_k_weights, gate_up_q, gate_up_scale, down_q, down_scale,
                                       activation, fast_accum, hidden_scale=hidden_scale)
    return experts_fp8(hidden, top_k_index, top_k_weights, gate_up_q, gate_up_scale, down_q, down_scale, activation,
                       fast_accum, hidden_scale)


@moe_experts_fp8.register_fake
def _(hidden, top_k_index, top_k_weights, gate_up_q, gate_up_scale, down_q, down_scale, activation, fast_accum=False,
      small_batch=False, hidden_scale=None):
    return torch.empty_like(hidden, dtype=hidden.dtype if hidden_scale is None else torch.bfloat16)


# ---- installing the tier on a model ----------------------------------------------------------------

def _linear_forward(self, x: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` with W in FP8: x (..., K) bf16 → (..., N) in x's dtype (per-token activation scales)."""
    rows = x.reshape(-1, x.shape[-1])
    return linear_product(self, *quantize_rows(rows), x.dtype).view(*x.shape[:-1], self._petri_fp8_weight.shape[0])


def _experts_forward(self, hidden_states, top_k_index, top_k_weights, hidden_scale=None):
    """The FP8 experts op; calls of at most :data:`petri.engine.cuda.fused.batch1_experts.MAX_PAIRS` pairs take
    the small-batch one where the compiled tier installed the small-batch experts (:func:`_install_fp8_experts`).
    ``hidden_scale``: the rows come quantized (:func:`takes_quantized`)."""
    return moe_experts_fp8(
        hidden_states, top_k_index, top_k_weights, self._petri_fp8_gate_up, self._petri_fp8_gate_up_scale,
        self._petri_fp8_down, self._petri_fp8_down_scale, self.config.hidden_activation, self._petri_fp8_fast,
        self._petri_fp8_small_batch and top_k_index.numel() <= MAX_PAIRS, hidden_scale,
    )


def _layer_linears(layers, prefix: str) -> list[tuple[str, torch.nn.Linear]]:
    """(name, module) of the linears of ``layers`` but the routers'."""
    return [(f"{prefix}.{name}", module) for name, module in layers.named_modules()
            if isinstance(module, torch.nn.Linear) and ".router." not in f".{name}."]


def dense_targets(model) -> list[tuple[str, torch.nn.Linear]]:
    """(name, module) of the linears the tier quantizes: the decoder layers' (not the router's),
    the decoder's self-conditioning MLP's and the lm head; where the compiled tier stacked
    projections (:mod:`petri.engine.cuda.fused.stacked_projections`), each group's stacked linear (named after
    its members, joined by ``+``) instead of its members."""
    decoder = model.model.decoder
    found = _layer_linears(decoder.layers, "model.decoder.layers")
    sc = getattr(decoder, "self_conditioning", None)
    if sc is not None:
        found += [(f"model.decoder.self_conditioning.{name}", m) for name, m in sc.named_modules() if isinstance(m, torch.nn.Linear)]
    names = {id(module): name for name, module in found}
    stacked = [("+".join(names[id(m)] for m in group.members), group.stacked) for group in stacked_groups(model)]
    return [(name, m) for name, m in found if not is_stacked_member(m)] + stacked + [("lm_head", model.lm_head)]


def encoder_targets(model) -> list[tuple[str, torch.nn.Linear]]:
    """(name, module) of the prompt encoder layers' linears but the routers' (the FP8 encoder's)."""
    layers = encoder_layers(model)
    return [] if layers is None else _layer_linears(layers, "model.encoder.layers")


def fp8_reason(lm: TorchLoadedModel) -> str | None:
    """``None`` when :func:`use_fp8` can run on ``lm``, else why not (naming the field); with the
    tier's ``fp8_encoder`` the encoder's linears and experts are checked too."""
    model = lm.model
    if getattr(lm, "backend", "torch") != "torch":
        return "precision fp8 applies to the torch backend only"
    if lm.dtype != torch.bfloat16:
        return f"precision fp8 needs a bf16 model (dtype is {str(lm.dtype).removeprefix('torch.')})"
    if lm.device.type == "cuda" and torch.cuda.get_device_capability(lm.device) < (8, 9):
        return "precision fp8 needs a GPU with FP8 matrix units (compute capability 8.9 or newer)"
    encoder = lm.fast_tier.fp8_encoder
    for name, module in dense_targets(model) + (encoder_targets(model) if encoder else []):
        if module.bias is not None:
            return f"{name} has a bias"
        if module.in_features % 16 or module.out_features % 16:
            return f"{name} is {module.out_features} × {module.in_features}; FP8 matmuls need multiples of 16"
    for name, experts in _experts_of(model, encoder):
        if (reason := fusable_reason(experts)) is not None:
            return f"{name}: {reason}"
    return None


def _experts_of(model, encoder: bool = False) -> list[tuple[str, Any]]:
    """(name, module) of the decoder layers' experts and, with ``encoder``, the prompt encoder's."""
    stacks = [("model.decoder.layers", model.model.decoder.layers)]
    if encoder and (layers := encoder_layers(model)) is not None:
        stacks.append(("model.encoder.layers", layers))
    return [(f"{prefix}.{i}.experts", layer.experts) for prefix, layers in stacks for i, layer in enumerate(layers)
            if getattr(layer, "experts", None) is not None]


def _quantized_once(quantized: dict, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows(weight)``, kept in ``quantized`` by the parameter's identity, so that a matrix
    the encoder shares with the decoder (tied parameters) is quantized once."""
    if id(weight) not in quantized:
        quantized[id(weight)] = quantize_rows(weight)
    return quantized[id(weight)]


def _put_forward(module, forward) -> None:
    """``forward`` (an FP8 forward function) as ``module``'s forward, the one it replaces (an instance
    forward another tier installed, or ``None``: the class's own) kept for :func:`_give_forward_back`."""
    current = vars(module).get("forward")
    if getattr(current, "__func__", None) is not forward:
        module._petri_bf16_forward = current
    module.forward = types.MethodType(forward, module)


def _give_forward_back(module, attributes: tuple[str, ...]) -> None:
    """Undo :func:`_put_forward`: drop the FP8 forward and ``attributes``, give back the forward kept."""
    previous = vars(module).pop("_petri_bf16_forward", None)
    for name in ("forward", *attributes):
        vars(module).pop(name, None)
    if previous is not None:
        module.forward = previous


def _install_linear(module, weight_scale: tuple[torch.Tensor, torch.Tensor], fast_accum: bool) -> None:
    """The FP8 forward over ``module``'s (an instance forward it had is kept for :func:`use_bf16`)."""
    module._petri_fp8_weight, module._petri_fp8_scale = weight_scale
    module._petri_fp8_fast = fast_accum
    _put_forward(module, _linear_forward)


@torch.no_grad()
def use_fp8(lm: TorchLoadedModel, fast_accum: bool = False) -> None:
    """Switch ``lm`` to the FP8 tier, in place (module docstring); raises ``ValueError`` naming why
    when it cannot. Drops the fast path's captured sessions. ``fast_accum``: the scaled matmuls with
    ``use_fast_accum`` (precision ``fp8-fast``: faster, with less exact accumulation). With the
    tier's ``fp8_encoder`` the encoder's linears and experts too, on the decoder's copies (each
    stacked member's rows of its group's copy)."""
    reason = fp8_reason(lm)
    if reason is not None:
        raise ValueError(reason)
    model = lm.model
    encoder = lm.fast_tier.fp8_encoder
    quantized: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for _, module in dense_targets(model):
        _install_linear(module, _quantized_once(quantized, module.weight), fast_accum)
    for group in stacked_groups(model):  # rows are quantized one by one: a member's rows are its own quantization
        rows = zip(group.stacked._petri_fp8_weight.split(group.widths), group.stacked._petri_fp8_scale.split(group.widths))
        quantized.update((id(member.weight), part) for member, part in zip(group.members, rows))
    for _, module in encoder_targets(model) if encoder else []:
        _install_linear(module, _quantized_once(quantized, module.weight), fast_accum)
    for _, experts in _experts_of(model, encoder):
        experts._petri_fp8_gate_up, experts._petri_fp8_gate_up_scale = _quantized_once(quantized, experts.gate_up_proj)
        experts._petri_fp8_down, experts._petri_fp8_down_scale = _quantized_once(quantized, experts.down_proj)
        experts._petri_fp8_fast = fast_accum
    lm.fast_tier.precision = "fp8-fast" if fast_accum else "fp8"
    _install_fp8_experts(lm)
    _forget_compiled_code(lm)


def _forget_compiled_code(lm: TorchLoadedModel) -> None:
    """After a forward changed: new fast-path sessions (their graphs hold the old forward) and, where
    the decoder layers are compiled (the model's tier says), Dynamo's code dropped, so that they are
    traced again (from Inductor's on-disk caches where it compiled the same graph before)."""
    if lm.fast_tier.compiled:
        import torch._dynamo

        torch._dynamo.reset()
    lm.fast_tier.drop_sessions()


def _install_fp8_experts(lm: TorchLoadedModel) -> None:
    """The FP8 experts forward over whatever experts forward is installed (the library's or the
    compiled tier's op, kept as the forward :func:`use_bf16` restores), told whether the compiled
    tier's small-batch lever is on (:attr:`petri.engine.torch.fast_tier.FastTier.small_batch_experts`).
    :mod:`petri.engine.cuda.compiled_tier` changes the experts with the FP8 tier off and switches it on
    again after, which is how its ops end up under this forward."""
    for _, experts in _experts_of(lm.model, lm.fast_tier.fp8_encoder):
        _put_forward(experts, _experts_forward)
        experts._petri_fp8_small_batch = lm.fast_tier.small_batch_experts


def embedding_columns(lm: TorchLoadedModel) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's embedding matrix (V, H) for the FP8 self-conditioning product
    (:class:`petri.engine.torch.fast_tier.FastOptions`): its transpose quantized per row, i.e. per hidden
    column, q (H, V) e4m3 and scale (H,) float32, so that ``scaled_matmul(p, p_scale, q, scale)`` is
    probabilities (N, V) × embedding → (N, H). Made on first use while the FP8 tier is on and kept
    on the embedding module until :func:`use_bf16`."""
    if not is_fp8(lm):
        raise ValueError(f"the FP8 self-conditioning needs the FP8 tier (precision is {precision_of(lm)})")
    embed = lm.model.model.decoder.embed_tokens
    columns = vars(embed).get("_petri_fp8_columns")
    if columns is None:
        columns = embed._petri_fp8_columns = quantize_rows(embed.weight.detach().T.contiguous())
    return columns


def use_bf16(lm: TorchLoadedModel) -> None:
    """Undo :func:`use_fp8`: the modules' own forward and bf16 weights again (the experts: the
    forward they had before, e.g. the compiled tier's op)."""
    model = lm.model
    if not is_fp8(lm):
        return
    if lm.fast_tier.released_bf16:
        raise ValueError(f"precision: cannot leave {precision_of(lm)}: {RELEASED_REASON}")
    for _, module in dense_targets(model) + encoder_targets(model):
        if "_petri_fp8_weight" not in vars(module):  # an encoder linear the tier left in bf16
            continue
        _give_forward_back(module, ("_petri_fp8_weight", "_petri_fp8_scale", "_petri_fp8_fast"))
    for _, experts in _experts_of(model, encoder=True):
        if "_petri_fp8_gate_up" not in vars(experts):  # the encoder's in bf16: its forward is not the tier's
            continue
        _give_forward_back(experts, ("_petri_fp8_gate_up", "_petri_fp8_gate_up_scale", "_petri_fp8_down",
                                     "_petri_fp8_down_scale", "_petri_fp8_fast", "_petri_fp8_small_batch"))
    vars(model.model.decoder.embed_tokens).pop("_petri_fp8_columns", None)
    lm.fast_tier.precision = "bf16"
    _forget_compiled_code(lm)


def set_precision(lm: TorchLoadedModel, precision: str, fp8_encoder: bool | None = None,
                  fp8_self_conditioning: bool | None = None) -> None:
    """``"bf16"`` (the model's own weights), ``"fp8"`` or ``"fp8-fast"`` (:func:`use_fp8`);
    ``ValueError`` names the field for anything else. Opt-in levers, ``None`` keeps the tier's:
    ``fp8_encoder``, whether the FP8 tier, when on, runs the prompt encoder in FP8 too (module
    docstring); ``fp8_self_conditioning``, the tier's :class:`petri.engine.torch.fast_tier.FastOptions`
    flag (refused, before anything changes, where the tier does not compute the self-conditioning
    softmax in its logits pass: outside the compiled tier). ``--precision`` writes all three as one
    text (:mod:`petri.engine.precision_choice`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    tier = lm.fast_tier
    if fp8_self_conditioning and not tier.softmax_self_conditioning(tier.options):
        raise ValueError("precision: +sc-fp8 (the FP8 self-conditioning) runs in the compiled tier only (--compile), "
                         "where the logits pass computes the self-conditioning softmax")
    encoder = tier.fp8_encoder if fp8_encoder is None else bool(fp8_encoder)
    if precision != precision_of(lm) or encoder != tier.fp8_encoder:
        use_bf16(lm)
        tier.fp8_encoder = encoder
        if precision != "bf16":
            use_fp8(lm, fast_accum=precision == "fp8-fast")
    if fp8_self_conditioning is not None and tier.options.fp8_self_conditioning != fp8_self_conditioning:
        tier.set_options(replace(tier.options, fp8_self_conditioning=bool(fp8_self_conditioning)))


def set_precision_choice(lm: TorchLoadedModel, choice) -> None:
    """:func:`set_precision` as a :class:`petri.engine.precision_choice.PrecisionChoice` (``--precision``'s
    text, read) says: its precision and both levers."""
    set_precision(lm, choice.precision, fp8_encoder=choice.fp8_encoder, fp8_self_conditioning=choice.fp8_self_conditioning)


def precision_of(lm: TorchLoadedModel) -> str:
    """``"fp8"`` or ``"fp8-fast"`` when the FP8 tier is on for ``lm`` (its tier's precision,
    :class:`petri.engine.torch.fast_tier.FastTier`), else ``"bf16"`` (whatever the dtype)."""
    return lm.fast_tier.precision


def is_fp8(lm: TorchLoadedModel) -> bool:
    return precision_of(lm) != "bf16"
