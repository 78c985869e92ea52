"""Configurations for small, text-only DiffusionGemma-architecture models.

``DiffusionGemmaConfig`` always builds a vision tower; a minimal one (hidden 16, one layer) keeps
small models text-only in practice. The mixture-of-experts block and self-conditioning stay on,
so the real code paths run.
"""

from __future__ import annotations

from transformers import DiffusionGemmaConfig

MINIMAL_VISION_CONFIG = {
    "model_type": "gemma4_vision",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "head_dim": 16,
}


def small_diffusion_gemma_config(
    *,
    vocab_size: int,
    canvas_length: int,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    head_dim: int = 32,
    global_head_dim: int | None = None,
    intermediate_size: int = 128,
    num_experts: int = 4,
    top_k_experts: int = 2,
    expert_size: int = 32,
    sliding_window: int = 64,
    max_positions: int = 2048,
    pad_token_id: int = 0,
    eos_token_id: int = 1,
    bos_token_id: int = 2,
) -> DiffusionGemmaConfig:
    """A DiffusionGemma config of the given size; the last layer is full attention, the rest sliding.

    ``global_head_dim`` is the full-attention layers' head dimension (the full-size model's is 512,
    its sliding layers' 256); by default it equals ``head_dim``.

    The token ids of ``pad``/``eos``/``bos`` must match the tokenizer the model is used with.
    """
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    layer_types = ["sliding_attention"] * (num_layers - 1) + ["full_attention"]
    text_config = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "global_head_dim": head_dim if global_head_dim is None else global_head_dim,
        "sliding_window": sliding_window,
        "layer_types": layer_types,
        "num_experts": num_experts,
        "top_k_experts": top_k_experts,
        "moe_intermediate_size": expert_size,
        "enable_moe_block": True,
        "max_position_embeddings": max_positions,
        "pad_token_id": pad_token_id,
        "eos_token_id": eos_token_id,
        "bos_token_id": bos_token_id,
    }
    return DiffusionGemmaConfig(
        text_config=text_config,
        vision_config=dict(MINIMAL_VISION_CONFIG),
        canvas_length=canvas_length,
        # No image tokens in these vocabularies: keep the ids out of range of real tokens.
        image_token_id=vocab_size + 2,
        boi_token_id=vocab_size + 1,
        eoi_token_id=vocab_size + 3,
    )
