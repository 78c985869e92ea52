"""Helpers of the tests that run the tiny random DiffusionGemma (petri.engine.torch.tiny) through its
whole forward: the logits of a seeded random canvas after a fixed prompt."""

from __future__ import annotations

import torch


def tiny_logits(lm, seed: int = 0) -> torch.Tensor:
    """``lm``'s logits (2, canvas, V) in float32 for two random canvases drawn with ``seed`` after the
    prompt [5, 9, 17, 33], on the CPU, without gradients."""
    torch.manual_seed(seed)
    canvas = torch.randint(4, lm.vocab_size, (2, lm.canvas_length))
    with torch.no_grad():
        return lm.model(decoder_input_ids=canvas, input_ids=torch.tensor([[5, 9, 17, 33]] * 2)).logits.float()


def save_checkpoint(lm, folder):
    """Save ``lm``'s model and tokenizer into ``folder`` (a checkpoint folder, as the CLI and the
    loaders read one); returns ``folder``."""
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return folder
