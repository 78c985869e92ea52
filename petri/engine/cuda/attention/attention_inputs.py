"""The decoder attention's inputs as one op (issue 25: the compiled tier's fused attention inputs).

Between its q/k/v products and the attention function, transformers'
``DiffusionGemmaDecoderTextAttention`` computes, per head of D values: q = rope(q_norm(q)),
k = rope(k_norm(k)), v = v_norm(v) (the global layers have no ``v_proj``: their v is the raw k),
transposes the three to (B, heads, L, D) and appends k and v to the prompt's (``append_to_cache``:
``torch.cat`` along the positions, a copy of the prompt's keys and values in every layer of every
step). Compiled, Inductor spreads this over four or five kernels a layer; on an H200 at 12 samples
they took about 2.1 ms of a 47.7 ms step (issue 25's profiles, the kernels named
``…add_cat_mean_mul_neg_pow…``), about twice what reading and writing their bytes once takes. Here
it is one Triton launch: a program per canvas token and group of heads computes q heads, or k heads
and their v, and writes them where the attention reads them; a program per (sample, key/value head)
and group of prompt positions copies those rows of the prompt's keys and values. Measured on an
H200 (``experiments/kernel_levers.py --parts attention_inputs``; docs/performance-log.md, "Levers taken"):
1.1 ms a 12-sample step over the 30 layers where the library's ops compiled alone take 5.0, and
the fastest configuration's 12 × 24 seed 1.177 → 1.161 s side by side with the first launch form.

The roundings are the library's eager ops': each norm in float32 (sum of squares over D, plus eps,
to the power -1/2, times the weight where the norm has one) rounded to the model's dtype, then
rope's two products each rounded and their sum rounded, ``bf16(bf16(n·cos) + bf16(rotate_half(n)·sin))``
(``enable_fp_fusion=False``: no fma). The sum of squares is taken in another order than torch's and
the power is a reciprocal square root, so a value can differ from the library's by a rounding (GPU
tests bound it). Off CUDA, or for shapes the kernel does not take, the op is
:func:`attention_inputs_reference`, the library's own ops (bit-equal to its modules).

Shapes: the projections query (B, L, H·D), key (B, L, Hkv·D), value (B, L, Hkv·D) or ``None``
(values are the keys), any strides with unit stride along the last axis (the stacked projections'
column views); cos, sin (B or 1, L, D); the prompt's keys and values (B, Hkv, P, D). Out: query
(B, H, L, D) contiguous (what the split attention folds without a copy), keys and values
(B, Hkv, P + L, D) contiguous, as ``torch.cat`` makes them.

:func:`fused_attention_forward` is the decoder attention's forward with the op;
:func:`use_fused_attention_inputs` installs it on the attention modules that fit
(:func:`fused_attention_reason`), :func:`drop_fused_attention_inputs` takes it off.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.diffusion_gemma import modeling_diffusion_gemma as library

from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.cuda.fused.fused_norms import rms_norm

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from petri.engine.cuda.fused.fused_logits import libdevice

#: the attribute that marks an attention module whose forward is :func:`fused_attention_forward`
INSTALLED = "_petri_fused_attention_inputs"


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The library's ``apply_rotary_pos_emb`` on (B, L, heads, D) with cos, sin (B or 1, L, D)."""
    return library.apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=2)


def attention_inputs_reference(query, key, value, cos, sin, q_weight, k_weight, prompt_keys, prompt_values,
                               head_dim: int, eps: float):
    """The library's ops (module docstring): → query (B, H, L, D), keys, values (B, Hkv, P + L, D)."""
    batch, length = query.shape[:2]

    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(batch, length, -1, head_dim)

    q = rope(rms_norm(heads(query), q_weight, eps), cos, sin).transpose(1, 2).contiguous()
    k = rope(rms_norm(heads(key), k_weight, eps), cos, sin).transpose(1, 2)
    v = rms_norm(heads(key if value is None else value), None, eps).transpose(1, 2)
    return q, torch.cat([prompt_keys, k], dim=2), torch.cat([prompt_values, v], dim=2)


def _kernel_takes(query, key, value, cos, sin, prompt_keys, prompt_values, head_dim: int) -> bool:
    """Whether :func:`attention_inputs_triton` takes these: bf16 CUDA tensors, unit stride along
    the last axis of the projections and of cos and sin, contiguous prompt keys and values, and
    half a head a power of two (the kernel's tiles)."""
    tensors = [query, key, cos, sin, prompt_keys, prompt_values] + ([] if value is None else [value])
    half = head_dim // 2
    return (HAVE_TRITON and all(t.is_cuda and t.dtype == torch.bfloat16 for t in tensors)
            and all(t.stride(-1) == 1 for t in tensors[:4] + tensors[6:])
            and prompt_keys.is_contiguous() and prompt_values.is_contiguous()
            and head_dim % 2 == 0 and half > 0 and half & (half - 1) == 0)


#: heads one program computes (and prompt rows it copies) and its warps, by default: 4 heads at one
#: warp were the fastest or within 3 % of it of 1, 2, 4, 8 heads × 1, 2, 4 warps at the full-size
#: shapes on an H200 (``experiments/kernel_levers.py --parts attention_inputs``,
#: ``experiments/results/kernel_levers_h200_attention_inputs_launch.json``): a sliding layer at 12
#: samples 58.2 µs at one head a program → 36.8, a global layer 45.6 → 37.0, at one sample 10.5 → 5.0
#: and 6.9 → 4.8
HEADS_PER_PROGRAM, WARPS = 4, 1


def _group(heads: int, wanted: int) -> int:
    """Heads a program takes of a role with ``heads`` heads: the largest power of two up to
    ``wanted`` that divides ``heads``."""
    group = 1
    while group * 2 <= wanted and heads % (group * 2) == 0:
        group *= 2
    return group


def attention_inputs_triton(query, key, value, cos, sin, q_weight, k_weight, prompt_keys, prompt_values,
                            head_dim: int, eps: float, num_warps: int | None = None,
                            heads_per_program: int | None = None):
    """:func:`attention_inputs` in one launch (CUDA; :func:`_kernel_takes`). Each program computes
    up to ``heads_per_program`` (default :data:`HEADS_PER_PROGRAM`) q heads, or k heads with their
    v, of one token, or copies as many rows of the prompt's keys and values, with ``num_warps``
    (default :data:`WARPS`). Another launch may sum a head's squares in another order: a few
    outputs in ten million move by a rounding (the launch sweep's ``…_unequal``); the prompt's rows
    are copies whatever the launch."""
    batch, length = query.shape[:2]
    heads, kv_heads = query.shape[-1] // head_dim, key.shape[-1] // head_dim
    prompt = prompt_keys.shape[2]
    q_out = query.new_empty(batch, heads, length, head_dim)
    keys = key.new_empty(batch, kv_heads, prompt + length, head_dim)
    values = key.new_empty(batch, kv_heads, prompt + length, head_dim)
    wanted = heads_per_program or HEADS_PER_PROGRAM
    q_group, kv_group = _group(heads, wanted), _group(kv_heads, wanted)
    per_token = heads // q_group + kv_heads // kv_group
    computed = batch * length * per_token
    rows = 1 << (wanted.bit_length() - 1)  # prompt rows a copying program takes (masked past its head's P)
    copied = batch * kv_heads * triton.cdiv(prompt, rows)
    cos, sin = cos.expand(batch, length, head_dim), sin.expand(batch, length, head_dim)
    v = key if value is None else value
    if computed + copied:
        _attention_inputs_kernel[(computed + copied,)](
            query, key, v, query.stride(0), query.stride(1), key.stride(0), key.stride(1), v.stride(0), v.stride(1),
            cos, sin, cos.stride(0), cos.stride(1), q_weight, k_weight, prompt_keys, prompt_values,
            q_out, keys, values, length, prompt, heads, kv_heads, computed, eps,
            D=head_dim, HALF=head_dim // 2, Q_GROUP=q_group, KV_GROUP=kv_group, ROWS=rows,
            num_warps=num_warps or WARPS,
            enable_fp_fusion=False,  # the library's roundings: no fma
        )
    return q_out, keys, values


if HAVE_TRITON:

    @triton.jit
    def _store_normed(x_ptr, x_head_stride, w_ptr, cos_1, cos_2, sin_1, sin_2, out_ptr, out_head_stride, eps,
                      D: tl.constexpr, HALF: tl.constexpr, G: tl.constexpr, SCALED: tl.constexpr,
                      ROTATED: tl.constexpr):
        """G heads (D values each at ``x_ptr`` + g·x_head_stride, their halves as (G, HALF) tiles)
        normed (times the weight if SCALED), rounded to bf16, rotated if ROTATED (the halves'
        products and their sum each rounded), stored at ``out_ptr`` + g·out_head_stride."""
        half = tl.arange(0, HALF)[None, :]
        head = tl.arange(0, G)[:, None].to(tl.int64)
        at = x_ptr + head * x_head_stride + half
        x_1 = tl.load(at).to(tl.float32)
        x_2 = tl.load(at + HALF).to(tl.float32)
        inv = libdevice.rsqrt((tl.sum(x_1 * x_1, axis=1) + tl.sum(x_2 * x_2, axis=1)) / D + eps)[:, None]
        n_1 = x_1 * inv
        n_2 = x_2 * inv
        if SCALED:
            n_1 = n_1 * tl.load(w_ptr + half).to(tl.float32)
            n_2 = n_2 * tl.load(w_ptr + HALF + half).to(tl.float32)
        n_1 = n_1.to(tl.bfloat16).to(tl.float32)
        n_2 = n_2.to(tl.bfloat16).to(tl.float32)
        if ROTATED:  # rotate_half(n) = (-n_2, n_1)
            r_1 = (n_1 * cos_1).to(tl.bfloat16).to(tl.float32) + (-n_2 * sin_1).to(tl.bfloat16).to(tl.float32)
            r_2 = (n_2 * cos_2).to(tl.bfloat16).to(tl.float32) + (n_1 * sin_2).to(tl.bfloat16).to(tl.float32)
            n_1, n_2 = r_1, r_2
        at = out_ptr + head * out_head_stride + half
        tl.store(at, n_1.to(tl.bfloat16))
        tl.store(at + HALF, n_2.to(tl.bfloat16))

    @triton.jit
    def _attention_inputs_kernel(q_ptr, k_ptr, v_ptr, q_sb, q_sl, k_sb, k_sl, v_sb, v_sl,
                                 cos_ptr, sin_ptr, cs_sb, cs_sl, q_w, k_w, prompt_k_ptr, prompt_v_ptr,
                                 q_out_ptr, k_out_ptr, v_out_ptr, L, P, H, HKV, computed, eps,
                                 D: tl.constexpr, HALF: tl.constexpr, Q_GROUP: tl.constexpr,
                                 KV_GROUP: tl.constexpr, ROWS: tl.constexpr):
        """Programs below ``computed``: token t = b·L + l and its group j of H / Q_GROUP + HKV / KV_GROUP;
        a q group: q heads j·Q_GROUP … to q_out[b, head, l]; a k group: k heads g … and their v to
        keys and values [b, g, P + l]. The rest: ROWS prompt rows of one (b, g), copied to keys
        and values [b, g, p]."""
        pid = tl.program_id(0).to(tl.int64)
        half = tl.arange(0, HALF)[None, :]
        if pid < computed:
            q_groups = H // Q_GROUP
            per_token = q_groups + HKV // KV_GROUP
            token = pid // per_token
            j = pid % per_token
            b = token // L
            l = token % L  # noqa: E741 - the docstring's position l of L (token t = b·L + l)
            at = cos_ptr + b * cs_sb + l * cs_sl
            cos_1 = tl.load(at + half).to(tl.float32)
            cos_2 = tl.load(at + HALF + half).to(tl.float32)
            at = sin_ptr + b * cs_sb + l * cs_sl
            sin_1 = tl.load(at + half).to(tl.float32)
            sin_2 = tl.load(at + HALF + half).to(tl.float32)
            if j < q_groups:
                first = j * Q_GROUP
                _store_normed(q_ptr + b * q_sb + l * q_sl + first * D, D, q_w, cos_1, cos_2, sin_1, sin_2,
                              q_out_ptr + ((b * H + first) * L + l) * D, L * D, eps, D, HALF, Q_GROUP, True, True)
            else:
                g = (j - q_groups) * KV_GROUP
                row = ((b * HKV + g) * (P + L) + P + l) * D
                _store_normed(k_ptr + b * k_sb + l * k_sl + g * D, D, k_w, cos_1, cos_2, sin_1, sin_2,
                              k_out_ptr + row, (P + L) * D, eps, D, HALF, KV_GROUP, True, True)
                _store_normed(v_ptr + b * v_sb + l * v_sl + g * D, D, k_w, cos_1, cos_2, sin_1, sin_2,
                              v_out_ptr + row, (P + L) * D, eps, D, HALF, KV_GROUP, False, False)
        else:
            blocks = tl.cdiv(P, ROWS)
            u = pid - computed
            bg = u // blocks  # b · HKV + g: the prompt's (b, g) whose rows these are
            p = (u % blocks) * ROWS + tl.arange(0, ROWS)[:, None]
            full = tl.arange(0, 2 * HALF)[None, :]
            mask = (p < P) & (full >= 0)
            source = (bg * P + p) * D + full
            target = (bg * (P + L) + p) * D + full
            tl.store(k_out_ptr + target, tl.load(prompt_k_ptr + source, mask=mask), mask=mask)
            tl.store(v_out_ptr + target, tl.load(prompt_v_ptr + source, mask=mask), mask=mask)


@torch.library.custom_op("petri::attention_inputs", mutates_args=())
def attention_inputs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
    q_weight: torch.Tensor, k_weight: torch.Tensor, prompt_keys: torch.Tensor, prompt_values: torch.Tensor,
    head_dim: int, eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The attention's query (B, H, L, D) and its keys and values with the prompt's before the
    canvas's (B, Hkv, P + L, D) (module docstring); Triton on CUDA, else the reference. Opaque to
    ``torch.compile``."""
    args = (query, key, value, cos, sin, q_weight, k_weight, prompt_keys, prompt_values, head_dim, eps)
    if _kernel_takes(query, key, value, cos, sin, prompt_keys, prompt_values, head_dim):
        return attention_inputs_triton(*args)
    return attention_inputs_reference(*args)


@attention_inputs.register_fake
def _(query, key, value, cos, sin, q_weight, k_weight, prompt_keys, prompt_values, head_dim, eps):
    batch, length = query.shape[:2]
    positions = prompt_keys.shape[2] + length
    kv_heads = key.shape[-1] // head_dim
    return (query.new_empty(batch, query.shape[-1] // head_dim, length, head_dim),
            key.new_empty(batch, kv_heads, positions, head_dim), key.new_empty(batch, kv_heads, positions, head_dim))


def fused_attention_forward(self, hidden_states: torch.Tensor, position_embeddings, attention_mask,
                            cache=None, past_key_values=None, **kwargs):
    """transformers' decoder attention forward (either spelling of its cache argument: ``cache``
    since 5.24, ``past_key_values`` before) with the norms, the rotary embedding, the transposes and
    the appending to the prompt's keys and values as :func:`attention_inputs`. A cache that is
    compileable (transformers' static caches, whose appending pads) or whose batch is not the
    canvas's goes through the library's forward. hidden_states (B, L, hidden) → (B, L, hidden) and
    the attention function's weights."""
    cache = cache if cache is not None else past_key_values
    batch, length = hidden_states.shape[:2]
    layer: Any = cache.layers[self.layer_idx] if cache is not None else None
    if cache is not None and (cache.is_compileable or layer.keys.shape[0] != batch):
        return type(self).forward(self, hidden_states, position_embeddings, attention_mask, cache, **kwargs)
    cos, sin = position_embeddings
    query = self.q_proj(hidden_states)
    key = self.k_proj(hidden_states)
    value = self.v_proj(hidden_states) if self.v_proj is not None else None
    if layer is None:
        prompt_keys = prompt_values = key.new_empty(batch, key.shape[-1] // self.head_dim, 0, self.head_dim)
    else:
        prompt_keys, prompt_values = layer.keys.contiguous(), layer.values.contiguous()
    query, keys, values = attention_inputs(query, key, value, cos, sin, self.q_norm.weight, self.k_norm.weight,
                                           prompt_keys, prompt_values, self.head_dim, float(self.q_norm.eps))
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, library.eager_attention_forward)
    output, weights = attend(self, query, keys, values, attention_mask,
                             dropout=self.attention_dropout if self.training else 0.0, scaling=self.scaling,
                             sliding_window=self.sliding_window, is_causal=self.is_causal, **kwargs)
    return self.o_proj(output.reshape(batch, length, -1).contiguous()), weights


def fused_attention_reason(attention) -> str | None:
    """``None`` when :func:`fused_attention_forward` computes ``attention``'s forward, else what it
    lacks: the library's decoder attention (its q, k, v norms with one eps, q and k with a weight,
    v without) and an even head dim."""
    if not isinstance(attention, library.DiffusionGemmaDecoderTextAttention):
        return f"{type(attention).__name__} is not the library's decoder attention"
    norms: list[Any] = [getattr(attention, name, None) for name in ("q_norm", "k_norm", "v_norm")]
    if any(norm is None or not hasattr(norm, "eps") for norm in norms):
        return "the attention lacks a q, k or v norm with an eps"
    if len({norm.eps for norm in norms}) != 1:
        return "the q, k and v norms' eps differ"
    if getattr(norms[0], "weight", None) is None or getattr(norms[1], "weight", None) is None:
        return "the q or k norm has no weight"
    if getattr(norms[2], "weight", None) is not None:
        return "the v norm has a weight"
    if attention.head_dim % 2:
        return f"head dim {attention.head_dim} is odd"
    return None


def use_fused_attention_inputs(layers) -> int:
    """Install :func:`fused_attention_forward` on the attention of every layer of ``layers`` that
    fits (:func:`fused_attention_reason`); returns how many now have it."""
    count = 0
    for layer in layers:
        attention = getattr(layer, "self_attn", None)
        if attention is not None and fused_attention_reason(attention) is None:
            attention.forward = types.MethodType(fused_attention_forward, attention)
            setattr(attention, INSTALLED, True)
            count += 1
    return count


def drop_fused_attention_inputs(layers) -> None:
    """Undo :func:`use_fused_attention_inputs`: each attention's own forward again."""
    for layer in layers:
        attention = getattr(layer, "self_attn", None)
        if attention is not None and vars(attention).pop(INSTALLED, None):
            vars(attention).pop("forward", None)
