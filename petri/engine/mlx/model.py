"""DiffusionGemma's text path ported to MLX: the causal encoder that writes the prompt's KV cache and
the bidirectional decoder that refines a canvas against it.

A minimal, inference-only port of ``DiffusionGemmaForBlockDiffusion`` from transformers'
``models/diffusion_gemma/modeling_diffusion_gemma.py`` for text-only inputs, written to match it op
for op (fp32: logits within ~1e-5 of the torch model; ``tests/engine/test_mlx_backend.py`` checks it):

- scaled embeddings (``embed * sqrt(hidden)``, the scale cast to the weights' dtype);
- per layer: pre-norm attention with q/k RMS norms, a scale-free v norm, scaling 1.0, grouped KV
  heads, keys doubling as values in the layers without ``v_proj`` (full attention), RoPE
  ``default`` (sliding layers) or ``proportional`` with ``partial_rotary_factor`` (full layers);
  then a dense GeGLU MLP *plus* a routed mixture-of-experts block (router: scale-free RMS norm,
  learned scale, ``hidden**-0.5``, softmax, top-k, renormalised, per-expert scale), each with its
  own norms, summed, normed and added to the residual, times the layer scalar;
- the encoder: causal attention (sliding layers also limited to the window), keeping per layer the
  keys/values that transformers' ``DynamicCache`` keeps (the last ``sliding_window - 1`` positions in
  sliding layers, everything in full ones); it shares every weight with the decoder except its own
  layer scalars;
- the decoder: self-conditioning block (softmax of the previous logits → soft embeddings → GeGLU,
  added to the token embeddings, scale-free norm), then attention over the encoder cache plus the
  canvas with no mask, final norm, tied LM head, ``tanh`` softcapping of the logits in fp32.

Weights are read with ``mx.load`` from the checkpoint's safetensors file(s) (bf16 included); the
vision tower is ignored. The configuration is read with transformers' ``AutoConfig`` so per-layer
head sizes resolve exactly as in the torch model. ``mlx`` is imported by this module: import it only
when the MLX backend is wanted (``petri.engine.select`` does so lazily).

Not ported (the petri sampler needs none of it): images, padded batches / attention masks, static
caches, ``use_bidirectional_attention="all"``, attention biases, training. In bf16 the port and
torch round differently (max |logit diff| ≈ 0.5 on the embedded model's ±30 scale, about as far as
torch bf16 is from fp32); parity is stated and tested in fp32.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import numpy as np

_DTYPES = {
    "float32": mx.float32,
    "fp32": mx.float32,
    "bfloat16": mx.bfloat16,
    "bf16": mx.bfloat16,
    "float16": mx.float16,
    "fp16": mx.float16,
}

_DECODER = "model.decoder."
_ENCODER = "model.encoder.language_model."


def resolve_mlx_dtype(dtype: str | mx.Dtype = "auto") -> mx.Dtype:
    """``"auto"``: float32 on the CPU, bfloat16 on an Apple GPU; names like ``"bf16"`` are accepted."""
    if isinstance(dtype, mx.Dtype):
        return dtype
    name = str(dtype).strip().lower()
    if name == "auto":
        return mx.float32 if mx.default_device() == mx.cpu else mx.bfloat16
    if name not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of auto, {', '.join(sorted(_DTYPES))}")
    return _DTYPES[name]


# ------------------------------------------------------------------------------------------ ops
def rms_norm(x: mx.array, weight: mx.array | None, eps: float) -> mx.array:
    """``DiffusionGemmaRMSNorm``: fp32 ``x * (mean(x²) + eps) ** -0.5`` times ``weight`` (not
    ``1 + weight``), cast back to the input dtype."""
    h = x.astype(mx.float32)
    h = h * mx.power(mx.mean(h * h, axis=-1, keepdims=True) + eps, -0.5)
    if weight is not None:
        h = h * weight.astype(mx.float32)
    return h.astype(x.dtype)


def gelu_tanh(x: mx.array) -> mx.array:
    """``gelu_pytorch_tanh``."""
    return 0.5 * x * (1.0 + mx.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class _Linear:
    """A bias-free linear map. On the CPU the weight is stored transposed and contiguous, (in, out):
    MLX's CPU matmul is about twice as fast that way; on a GPU the (out, in) weight is used as is."""

    __slots__ = ("weight", "transposed")

    def __init__(self, weight: mx.array, transposed: bool):
        self.transposed = transposed
        self.weight = mx.contiguous(weight.T) if transposed else weight

    def __call__(self, x: mx.array) -> mx.array:
        return x @ self.weight if self.transposed else x @ self.weight.T


def rotate_half(x: mx.array) -> mx.array:
    half = x.shape[-1] // 2
    return mx.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_inv_freq(rope_parameters: dict[str, Any], head_dim: int) -> np.ndarray:
    """Inverse frequencies of one layer type, as transformers computes them (fp32).

    ``default``: ``dim = int(head_dim * partial_rotary_factor)`` rotated dims. ``proportional``:
    ``int(factor * head_dim // 2)`` rotated angles with exponents over the full ``head_dim``, the
    remaining angles at frequency 0 (unrotated), divided by ``factor``."""
    rope_type = rope_parameters.get("rope_type", "default")
    base = float(rope_parameters["rope_theta"])
    partial = float(rope_parameters.get("partial_rotary_factor", 1.0))
    if rope_type == "default":
        dim = int(head_dim * partial)
        exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
        return (1.0 / (np.float32(base) ** exponents)).astype(np.float32)
    if rope_type == "proportional":
        angles = int(partial * head_dim // 2)
        exponents = np.arange(0, 2 * angles, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
        rotated = (1.0 / (np.float32(base) ** exponents)).astype(np.float32)
        nope = head_dim // 2 - angles
        inv_freq = np.concatenate([rotated, np.zeros(nope, dtype=np.float32)]) if nope > 0 else rotated
        return (inv_freq / np.float32(rope_parameters.get("factor", 1.0))).astype(np.float32)
    raise NotImplementedError(f"RoPE type {rope_type!r} is not ported to MLX (default and proportional are)")


def rope_cos_sin(inv_freq: mx.array, positions: mx.array, dtype: mx.Dtype) -> tuple[mx.array, mx.array]:
    """cos/sin of shape (1, T, 1, D) for positions (T,), duplicated halves as transformers does."""
    freqs = positions.astype(mx.float32)[:, None] * inv_freq[None, :]
    emb = mx.concatenate([freqs, freqs], axis=-1)
    return mx.cos(emb).astype(dtype)[None, :, None, :], mx.sin(emb).astype(dtype)[None, :, None, :]


def apply_rope(x: mx.array, cos: mx.array, sin: mx.array) -> mx.array:
    """x: (B, T, H, D)."""
    return x * cos + rotate_half(x) * sin


# ---------------------------------------------------------------------------------------- model
@dataclass(frozen=True)
class LayerSpec:
    """What differs between layers: attention type, head size, KV heads, RoPE."""

    sliding: bool
    head_dim: int
    num_kv_heads: int
    rope_type: str  # "sliding_attention" / "full_attention": the key of the cos/sin tables


@dataclass
class EncoderCache:
    """Keys and values per layer, (B, H_kv, T_layer, D), as transformers' ``DynamicCache`` holds them
    after the encoder ran, and the prompt length (the decoder's first position)."""

    keys: list[mx.array]
    values: list[mx.array]
    prompt_length: int

    @property
    def nbytes(self) -> int:
        """Bytes of the kept keys and values."""
        return sum(int(a.nbytes) for a in (*self.keys, *self.values))

    def repeat(self, batch: int) -> EncoderCache:
        """The cache of a one-row prompt repeated ``batch`` times (``batch_repeat_interleave``)."""
        if batch == 1:
            return self
        return EncoderCache(
            keys=[mx.repeat(k, batch, axis=0) for k in self.keys],
            values=[mx.repeat(v, batch, axis=0) for v in self.values],
            prompt_length=self.prompt_length,
        )


class MLXDiffusionGemma:
    """Text-only DiffusionGemma inference in MLX.

    ``encode(prompt_ids)`` → :class:`EncoderCache`; ``decode(canvas, cache, self_conditioning_logits)``
    → fp32 logits (B, L, V), exactly ``DiffusionGemmaForBlockDiffusion(...).logits`` for the same cache.
    """

    def __init__(
        self, weights: dict[str, mx.array], text_config: Any, canvas_length: int, dtype: mx.Dtype = mx.float32
    ):
        tc = text_config
        if getattr(tc, "use_bidirectional_attention", None) == "all":
            raise NotImplementedError("use_bidirectional_attention='all' (non-causal encoder) is not ported to MLX")
        if getattr(tc, "attention_bias", False):
            raise NotImplementedError("attention_bias=True is not ported to MLX")
        if tc.hidden_activation not in ("gelu_pytorch_tanh", "gelu_tanh"):
            raise NotImplementedError(f"hidden_activation={tc.hidden_activation!r} is not ported to MLX")
        self.dtype = dtype
        self.canvas_length = int(canvas_length)
        self.vocab_size = int(tc.vocab_size)
        positions = getattr(tc, "max_position_embeddings", None)
        self.max_positions = int(positions) if isinstance(positions, int) and positions > 0 else None
        self.hidden_size = int(tc.hidden_size)
        self.num_layers = int(tc.num_hidden_layers)
        self.num_heads = int(tc.num_attention_heads)
        self.eps = float(tc.rms_norm_eps)
        self.sliding_window = int(tc.sliding_window)
        self.top_k = int(tc.top_k_experts)
        self.num_experts = int(tc.num_experts)
        self.softcap = tc.final_logit_softcapping
        self.layers: list[LayerSpec] = []
        for i, layer_type in enumerate(tc.layer_types[: self.num_layers]):
            per_layer = tc.per_layer_config[i]
            self.layers.append(
                LayerSpec(
                    sliding=layer_type == "sliding_attention",
                    head_dim=int(per_layer.head_dim),
                    num_kv_heads=int(per_layer.num_key_value_heads),
                    rope_type=layer_type,
                )
            )
        self.inv_freq: dict[str, mx.array] = {}
        for layer_type in sorted(set(tc.layer_types)):
            head_dim = int(tc.per_layer_config[layer_type].head_dim)
            self.inv_freq[layer_type] = mx.array(rope_inv_freq(tc.rope_parameters[layer_type], head_dim))

        def get(name: str, encoder_name: str | None = None) -> mx.array:
            for key in (_DECODER + name, encoder_name or _ENCODER + name):
                if key in weights:
                    return weights[key].astype(dtype)
            raise KeyError(f"weight {_DECODER + name} is missing from the checkpoint")

        transposed = mx.default_device() == mx.cpu
        self._gather_in_fp32 = transposed and dtype != mx.float32
        self.embed = get("embed_tokens.weight")
        # Cast to the weights' dtype as transformers does (bf16: sqrt(2816) = 53.07 becomes 53.0).
        self.embed_scale = mx.array(self.hidden_size**0.5, dtype=mx.float32).astype(dtype)
        head = weights["lm_head.weight"].astype(dtype) if "lm_head.weight" in weights else self.embed
        self.lm_head = _Linear(head, transposed)
        self.norm = get("norm.weight")
        self.sc_norm = get("self_conditioning.pre_norm.weight")
        self.sc = {
            n: _Linear(get(f"self_conditioning.{n}.weight"), transposed) for n in ("gate_proj", "up_proj", "down_proj")
        }
        linears = {
            "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "router.proj.weight",
        }
        self.w: list[dict[str, Any]] = []
        self.encoder_scalar: list[mx.array] = []
        for i, spec in enumerate(self.layers):
            p = f"layers.{i}."
            names = [
                "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.o_proj.weight",
                "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                "input_layernorm.weight", "post_attention_layernorm.weight",
                "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight",
                "post_feedforward_layernorm_1.weight", "post_feedforward_layernorm_2.weight",
                "pre_feedforward_layernorm_2.weight",
                "router.proj.weight", "router.scale", "router.per_expert_scale",
                "experts.gate_up_proj", "experts.down_proj",
            ]
            layer = {n: get(p + n) for n in names}
            if spec.sliding or _DECODER + p + "self_attn.v_proj.weight" in weights:
                layer["self_attn.v_proj.weight"] = get(p + "self_attn.v_proj.weight")
            # (E, 2I, H) → (E, H, 2I) and (E, H, I) → (E, I, H) for gather_mm.
            for name, new in (("experts.gate_up_proj", "experts.gate_up_t"), ("experts.down_proj", "experts.down_t")):
                swapped = mx.swapaxes(layer.pop(name), -1, -2)
                layer[new] = mx.contiguous(swapped) if transposed else swapped
            layer.update({n: cast(Any, _Linear(layer[n], transposed)) for n in linears if n in layer})  # a linear's weights
            layer["layer_scalar"] = weights.get(_DECODER + p + "layer_scalar", mx.ones((1,))).astype(dtype)
            self.encoder_scalar.append(weights.get(_ENCODER + p + "layer_scalar", mx.ones((1,))).astype(dtype))
            self.w.append(layer)
        mx.eval(
            self.embed, self.lm_head.weight, self.norm, self.sc_norm, [m.weight for m in self.sc.values()],
            [{k: v.weight if isinstance(v, _Linear) else v for k, v in layer.items()} for layer in self.w],
            self.encoder_scalar,
        )

    # ------------------------------------------------------------------------------- loading
    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: str | mx.Dtype = "auto") -> MLXDiffusionGemma:
        """Load a transformers DiffusionGemma checkpoint folder (one or several safetensors files)."""
        from transformers import AutoConfig

        folder = Path(path)
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
        return cls(load_weights(folder), config.text_config, config.canvas_length, resolve_mlx_dtype(dtype))

    @classmethod
    def from_torch(cls, model: Any, dtype: str | mx.Dtype = "float32") -> MLXDiffusionGemma:
        """Build from an in-memory ``DiffusionGemmaForBlockDiffusion`` (its state dict, via numpy)."""
        weights = {
            name: mx.array(tensor.detach().float().cpu().numpy())
            for name, tensor in model.state_dict().items()
            if "vision" not in name
        }
        return cls(weights, model.config.text_config, model.config.canvas_length, resolve_mlx_dtype(dtype))

    # ----------------------------------------------------------------------------- building blocks
    def _embed(self, ids: mx.array) -> mx.array:
        return self.embed[ids] * self.embed_scale

    def _qkv(self, i: int, h: mx.array, positions: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """Queries (B, Hq, T, D), keys and values (B, Hkv, T, D) of layer ``i`` for hidden states h."""
        spec, w = self.layers[i], self.w[i]
        b, t, _ = h.shape
        cos, sin = rope_cos_sin(self.inv_freq[spec.rope_type], positions, h.dtype)
        q = w["self_attn.q_proj.weight"](h).reshape(b, t, self.num_heads, spec.head_dim)
        q = apply_rope(rms_norm(q, w["self_attn.q_norm.weight"], self.eps), cos, sin)
        k_raw = w["self_attn.k_proj.weight"](h).reshape(b, t, spec.num_kv_heads, spec.head_dim)
        v_proj = w.get("self_attn.v_proj.weight")  # None in full-attention layers: keys double as values
        v = k_raw if v_proj is None else v_proj(h).reshape(b, t, spec.num_kv_heads, spec.head_dim)
        k = apply_rope(rms_norm(k_raw, w["self_attn.k_norm.weight"], self.eps), cos, sin)
        v = rms_norm(v, None, self.eps)
        return q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)

    def _attend(self, i: int, q: mx.array, k: mx.array, v: mx.array, mask: mx.array | None) -> mx.array:
        b, _, t, _ = q.shape
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask=mask)
        out = out.transpose(0, 2, 1, 3).reshape(b, t, -1)
        return self.w[i]["self_attn.o_proj.weight"](out)

    def _feed_forward(self, i: int, h: mx.array, scalar: mx.array) -> mx.array:
        """Everything after the attention residual: dense MLP + routed experts, norms, residual, scalar."""
        w = self.w[i]
        residual = h
        x = rms_norm(h, w["pre_feedforward_layernorm.weight"], self.eps)
        x = w["mlp.down_proj.weight"](gelu_tanh(w["mlp.gate_proj.weight"](x)) * w["mlp.up_proj.weight"](x))
        h1 = rms_norm(x, w["post_feedforward_layernorm_1.weight"], self.eps)

        flat = residual.reshape(-1, residual.shape[-1])
        weights, index = self._route(i, flat)
        h2 = self._experts(i, rms_norm(flat, w["pre_feedforward_layernorm_2.weight"], self.eps), index, weights)
        h2 = rms_norm(h2.reshape(residual.shape), w["post_feedforward_layernorm_2.weight"], self.eps)

        h = residual + rms_norm(h1 + h2, w["post_feedforward_layernorm.weight"], self.eps)
        return h * scalar

    def _route(self, i: int, flat: mx.array) -> tuple[mx.array, mx.array]:
        """Router: (N, H) → top-k weights (N, K) fp32 and expert indices (N, K)."""
        w = self.w[i]
        x = rms_norm(flat, None, self.eps) * w["router.scale"] * (self.hidden_size**-0.5)
        probs = mx.softmax(w["router.proj.weight"](x).astype(mx.float32), axis=-1)
        index = mx.argsort(-probs, axis=-1)[:, : self.top_k]
        top = mx.take_along_axis(probs, index, axis=-1)
        top = top / mx.sum(top, axis=-1, keepdims=True)
        return top * w["router.per_expert_scale"][index], index

    def _experts(self, i: int, x: mx.array, index: mx.array, weights: mx.array) -> mx.array:
        """Σ_k weight_k · down_k(gelu(gate_k(x)) · up_k(x)) with one gathered matmul per projection."""
        w = self.w[i]
        n, hidden = x.shape
        inter = w["experts.down_t"].shape[-2]
        xs = x.reshape(n, 1, 1, hidden)
        gate_up_w, down_w = w["experts.gate_up_t"], w["experts.down_t"]
        if self._gather_in_fp32:  # MLX's CPU gather_mm takes float32 only
            xs, gate_up_w, down_w = xs.astype(mx.float32), gate_up_w.astype(mx.float32), down_w.astype(mx.float32)
        gate_up = mx.gather_mm(xs, gate_up_w, rhs_indices=index)  # (N, K, 1, 2I)
        act = gelu_tanh(gate_up[..., :inter]) * gate_up[..., inter:]
        if self._gather_in_fp32:
            act = act.astype(x.dtype).astype(mx.float32)  # round as the model's dtype would
        out = mx.gather_mm(act, down_w, rhs_indices=index).squeeze(-2).astype(x.dtype)  # (N, K, H)
        out = out * weights[..., None].astype(out.dtype)
        return mx.sum(out, axis=1).astype(x.dtype)

    # --------------------------------------------------------------------------------- encoder
    def encode(self, prompt_ids: mx.array | np.ndarray | list) -> EncoderCache:
        """Run the causal encoder over the prompt (B, P) and keep its per-layer keys/values.

        Full layers keep all P positions; sliding layers keep the last ``sliding_window - 1``
        (what ``DynamicSlidingWindowLayer`` keeps). The encoder's hidden output is not needed."""
        ids = mx.array(np.asarray(prompt_ids, dtype=np.int32))
        if ids.ndim == 1:
            ids = ids[None]
        _, length = ids.shape
        positions = mx.arange(length)
        q_idx, kv_idx = positions[:, None], positions[None, :]
        causal = kv_idx <= q_idx
        sliding = causal & (kv_idx > q_idx - self.sliding_window)
        h = self._embed(ids)
        keys, values = [], []
        for i, spec in enumerate(self.layers):
            residual = h
            x = rms_norm(h, self.w[i]["input_layernorm.weight"], self.eps)
            q, k, v = self._qkv(i, x, positions)
            keep = self.sliding_window - 1 if spec.sliding and self.sliding_window > 1 else length
            keys.append(k[:, :, -keep:] if length > keep else k)
            values.append(v[:, :, -keep:] if length > keep else v)
            if i == self.num_layers - 1:
                break  # the last layer's output feeds nothing the decoder reads
            x = self._attend(i, q, k, v, sliding if spec.sliding else causal)
            h = residual + rms_norm(x, self.w[i]["post_attention_layernorm.weight"], self.eps)
            h = self._feed_forward(i, h, self.encoder_scalar[i])
        mx.eval(keys, values)
        return EncoderCache(keys=keys, values=values, prompt_length=int(length))

    # --------------------------------------------------------------------------------- decoder
    def self_conditioning_embeddings(self, logits: mx.array | None, inputs_embeds: mx.array) -> mx.array:
        if logits is None:
            soft = mx.zeros_like(inputs_embeds)
        else:
            probs = mx.softmax(logits.astype(mx.float32), axis=-1).astype(self.dtype)
            soft = (probs @ self.embed) * self.embed_scale
        normed = rms_norm(soft, self.sc_norm, self.eps)
        signal = self.sc["down_proj"](gelu_tanh(self.sc["gate_proj"](normed)) * self.sc["up_proj"](normed))
        return rms_norm(inputs_embeds + signal, None, self.eps)

    def decode_hidden(
        self, canvas: mx.array, cache: EncoderCache, self_conditioning_logits: mx.array | None = None
    ) -> mx.array:
        """Decoder hidden states (B, L, H) after the final norm."""
        canvas = mx.array(np.asarray(canvas, dtype=np.int32)) if not isinstance(canvas, mx.array) else canvas
        _, length = canvas.shape
        positions = mx.arange(cache.prompt_length, cache.prompt_length + length)
        h = self.self_conditioning_embeddings(self_conditioning_logits, self._embed(canvas))
        for i in range(self.num_layers):
            residual = h
            x = rms_norm(h, self.w[i]["input_layernorm.weight"], self.eps)
            q, k, v = self._qkv(i, x, positions)
            k = mx.concatenate([cache.keys[i], k], axis=2)
            v = mx.concatenate([cache.values[i], v], axis=2)
            x = self._attend(i, q, k, v, None)
            h = residual + rms_norm(x, self.w[i]["post_attention_layernorm.weight"], self.eps)
            h = self._feed_forward(i, h, self.w[i]["layer_scalar"])
        return rms_norm(h, self.norm, self.eps)

    def decode(
        self, canvas: mx.array, cache: EncoderCache, self_conditioning_logits: mx.array | None = None
    ) -> mx.array:
        """fp32 logits (B, L, V) for the canvas (B, L) given the encoder cache (batch B)."""
        logits = self.lm_head(self.decode_hidden(canvas, cache, self_conditioning_logits)).astype(mx.float32)
        if self.softcap is not None:
            logits = mx.tanh(logits / self.softcap) * self.softcap
        return logits

    __call__ = decode


def load_weights(folder: Path) -> dict[str, mx.array]:
    """Every non-vision tensor of a checkpoint folder (``model.safetensors`` or a sharded index)."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights: dict[str, mx.array] = {}
    for name in files:
        path = folder / name
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing (MLX reads safetensors checkpoints only)")
        loaded = cast(dict[str, mx.array], mx.load(str(path)))  # a safetensors file: a dict of arrays
        weights.update({k: v for k, v in loaded.items() if "vision" not in k})
    return weights
