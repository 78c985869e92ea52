"""The sliding layers' flash attention at one sample (petri.engine.cuda.attention.sliding_attention): which calls
the flash kernel takes (hand-worked), the install on a model (on the CPU every call goes to the
library's SDPA: the same logits) and its undo, and on a GPU (skipped elsewhere) the function against
PyTorch's SDPA at the full-size sliding shape: the flash kernel's folded result at one sample,
SDPA's own from two on."""

from __future__ import annotations

import pytest
import torch

from attention_support import check_against_sdpa, tiny_decoder
from petri.engine.cuda.attention.sliding_attention import (
    FLASH_BELOW_SAMPLES,
    NAME,
    attend_flash,
    flash_takes,
    petri_flash_sliding,
    use_flash_sliding,
)
from petri.engine.cuda.attention.split_attention import drop_split_attention, split_attention, use_split_attention

CUDA = torch.cuda.is_available()


def test_which_calls_the_flash_kernel_takes():
    def query(batch=1, dim=256, dtype=torch.bfloat16):
        return torch.zeros(batch, 16, 4, dim, dtype=dtype)

    assert FLASH_BELOW_SAMPLES == 2
    assert flash_takes(query()) and flash_takes(query(dtype=torch.float16)) and flash_takes(query(dim=32))
    assert not flash_takes(query(batch=2))  # cuDNN's kernel from two samples on
    assert not flash_takes(query(dim=512))  # over the flash kernel's widest head
    assert not flash_takes(query(dim=100))  # not a multiple of 8
    assert not flash_takes(query(dtype=torch.float32))


def test_installed_on_a_model_it_leaves_its_outputs_and_undoes_cleanly():
    model, layers, ids, canvas = tiny_decoder(num_layers=4, seed=3, prompt_length=24)
    with torch.no_grad():
        want = model(input_ids=ids, decoder_input_ids=canvas).logits
        assert use_flash_sliding(layers, widest_head=16) == 0  # the tiny model's heads are 32 wide
        layers[-1].self_attn.head_dim = 512  # a global layer as the full-size model's: not this function's
        assert use_flash_sliding(layers) == 3
        names = [layer.self_attn.config._attn_implementation for layer in layers]
        assert names == [NAME, NAME, NAME, "sdpa"]
        assert use_flash_sliding(layers) == 0  # installed once
        layers[-1].self_attn.head_dim = 32
        got = model(input_ids=ids, decoder_input_ids=canvas).logits
        drop_split_attention(layers)
        assert use_split_attention(layers, widest_fast_head=0) == 4 and use_flash_sliding(layers) == 0  # one each
        drop_split_attention(layers)
    assert torch.equal(got, want)
    assert all(layer.self_attn.config._attn_implementation == "sdpa" for layer in layers)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("batch", [1, 2])
def test_the_flash_path_at_one_sample_and_sdpa_from_two_on_gpu(batch):
    """Sliding layer of the full-size architecture: 8 key/value heads, head dim 256, 1,279 keys (1,023
    kept prompt positions and the canvas)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    got, module, (query, key, value) = check_against_sdpa(petri_flash_sliding, batch, kv_heads=8, keys=1279, dim=256)
    if batch < FLASH_BELOW_SAMPLES:
        flash = split_attention(query, key, value, 1.0, 1, attend=attend_flash).transpose(1, 2)
        assert torch.equal(got, flash)
    else:
        library, _ = sdpa_attention_forward(module, query, key, value, None, scaling=1.0)
        assert torch.equal(got, library)
