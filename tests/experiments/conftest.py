"""Fixtures of the tests of ``experiments/`` scripts: a tiny random stand-in for the teacher."""

from __future__ import annotations

import pytest
import torch

CHAT = ("{% for m in messages %}<bos>{{ m['role'] }}: {{ m['content'] }}<eos>{% endfor %}"
        "{% if add_generation_prompt %}<bos>assistant: {% endif %}")


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory):
    """A tiny random llama with petri's in-process tokenizer and a chat template, saved as a folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from petri.engine.torch.tiny import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    tok.chat_template = CHAT
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    folder = tmp_path_factory.mktemp("teacher")
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
