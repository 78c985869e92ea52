"""Tiny random DiffusionGemma models with a tokenizer trained in-process, for tests and demos.

Random weights show nothing about language, but they run every code path of the real model in
milliseconds on a CPU and need no files.
"""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import DiffusionGemmaForBlockDiffusion, PretrainedConfig, PreTrainedTokenizerFast

from petri.engine.torch.configs import small_diffusion_gemma_config
from petri.engine.torch.model import LoadedModel

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]

_TRAINING_TEXT = """
The customer placed an order for twelve units and the warehouse checked the inventory.
A person in the shipping team confirmed the order and updated the stock level.
The inventory shows ninety units in stock while the order asks for one hundred and twenty units.
Every order names a customer, a product, a quantity and a delivery date.
The manager of the store counted the inventory at the end of the day.
A supplier delivered new stock and the person at the desk signed the invoice.
""".strip()


def build_tiny_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on a few built-in sentences (ids 0-3: pad, eos, bos, unk)."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_TRAINING_TEXT.splitlines() * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
    )


def tiny_random_model(canvas_length: int = 16, seed: int = 0, dtype: torch.dtype = torch.float32,
                      **config_overrides) -> LoadedModel:
    """A randomly initialised 2-layer DiffusionGemma (MoE and self-conditioning on) on the CPU, its
    weights drawn in float32 and then cast to ``dtype`` (bf16: what the FP8 tier takes)."""
    tokenizer = build_tiny_tokenizer()
    config = small_diffusion_gemma_config(
        vocab_size=len(tokenizer), canvas_length=canvas_length, **config_overrides
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DiffusionGemmaForBlockDiffusion(config).eval().to(dtype)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        model_id=f"tiny-random-seed{seed}",
        device=torch.device("cpu"),
        dtype=dtype,
    )


def tiny_masked_model(canvas_length: int = 16, seed: int = 0, max_positions: int = 128, architecture: str = "bert"):
    """A randomly initialised 2-layer ``BertForMaskedLM`` (or ``ModernBertForMaskedLM``:
    ``architecture="modernbert"``) with the tiny tokenizer plus a ``<mask>`` token, on the CPU, as a
    :class:`petri.engine.families.masked.MaskedLoadedModel`."""
    from transformers import BertConfig, BertForMaskedLM, ModernBertConfig, ModernBertForMaskedLM

    from petri.engine.families.masked import MaskedLoadedModel

    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    sizes = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=max_positions, pad_token_id=tokenizer.pad_token_id)
    config: PretrainedConfig
    model_class: Any  # BertForMaskedLM or ModernBertForMaskedLM, each of its own config
    if architecture == "bert":
        config, model_class = BertConfig(**sizes), BertForMaskedLM
    elif architecture == "modernbert":
        ids = dict(eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                   cls_token_id=tokenizer.bos_token_id, sep_token_id=tokenizer.eos_token_id)
        # a wide initialisation: the default (0.02) gives near-equal logits, whose argmax is a coin toss of rounding
        config = ModernBertConfig(**sizes, **ids, local_attention=max_positions, initializer_range=0.5)
        model_class = ModernBertForMaskedLM
    else:
        raise ValueError(f"architecture={architecture!r} is not one of bert, modernbert")
    config.canvas_length = canvas_length
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config).eval()
    return MaskedLoadedModel(
        model=model, tokenizer=tokenizer, model_id=f"tiny-{architecture}-seed{seed}", device=torch.device("cpu"),
        dtype=torch.float32, mask_token_id=tokenizer.mask_token_id, canvas_length=canvas_length,
    )
