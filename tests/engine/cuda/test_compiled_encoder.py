"""The compiled tier's prompt encoder (issue 25, petri.engine.torch.decoder_hooks.writing_own_cache_layer):
with the eager backend and the library's experts every compiled layer computes the uncompiled ops,
so the cache it writes must equal, bit for bit, the one the library's own encoder writes (the
reference: the same model before compilation); with the fused experts op it differs by that op's
float rounding only; a cache that already holds a prompt is extended through the uncompiled layers
into the right layers; and the kept prompts never hand one form's cache to the other."""

from __future__ import annotations

import pytest
import torch

from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.torch.decoder_hooks import encoder_layers
from petri.engine.torch.step import cache_kwarg, encode_prompt_once, encoded_prompt
from petri.engine.torch.tiny import tiny_random_model

#: longer than the tiny model's sliding window (8 below), so the sliding layers keep only its tail
PROMPT = list(range(20, 45))


@pytest.fixture()
def lm():
    """Six layers (five sliding with a window of 8, one full) of a tiny random DiffusionGemma."""
    model = tiny_random_model(canvas_length=16, num_layers=6, sliding_window=8, seed=3)
    yield model
    uncompile_regions(model)


def encode(lm, ids) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cache = encode_prompt_once(lm, torch.tensor([ids], device=lm.device))
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def assert_same_cache(got, want, atol: float = 0.0) -> None:
    assert len(got) == len(want)
    for index, ((keys, values), (want_keys, want_values)) in enumerate(zip(got, want)):
        assert keys.shape == want_keys.shape, f"layer {index}"
        torch.testing.assert_close(keys, want_keys, rtol=0, atol=atol, msg=f"layer {index} keys")
        torch.testing.assert_close(values, want_values, rtol=0, atol=atol, msg=f"layer {index} values")


def test_the_compiled_encoder_writes_the_cache_the_library_writes(lm):
    want = encode(lm, PROMPT)
    assert want[0][0].shape[2] == 8 - 1 and want[-1][0].shape[2] == len(PROMPT)  # sliding tail, full prompt
    compile_regions(lm, backend="eager", fused_experts=False)
    assert lm.fast_tier.compiled_encoder_layers == list(encoder_layers(lm.model))
    assert_same_cache(encode(lm, PROMPT), want)


def test_with_the_fused_experts_op_the_cache_differs_by_its_rounding_only(lm):
    want = encode(lm, PROMPT)
    compile_regions(lm, backend="eager")
    assert "forward" in vars(encoder_layers(lm.model)[0].experts)  # the encoder's experts through the op
    assert_same_cache(encode(lm, PROMPT), want, atol=1e-5)


def test_a_filled_cache_is_extended_in_its_own_layers(lm):
    """``generate`` encodes a finished block after the prompt into the same cache: that call takes
    the uncompiled layers, whose attention's layer number is 0 while compiled."""

    def extended():
        model = lm.model
        cache = encode_prompt_once(lm, torch.tensor([PROMPT]))
        more = torch.tensor([[50, 51, 52]])
        start = len(PROMPT)
        position_ids = torch.arange(start, start + 3).unsqueeze(0)
        encoder = model.model.encoder
        masks = encoder.create_masks_for_generate(
            config=model.config, inputs_embeds=torch.empty((1, 3, 0)), attention_mask=torch.ones((1, start + 3), dtype=torch.bool),
            position_ids=position_ids, **cache_kwarg(encoder.create_masks_for_generate, cache),
        )
        encoder(input_ids=more, attention_mask=masks, position_ids=position_ids, **cache_kwarg(encoder.forward, cache))
        return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]

    want = extended()
    compile_regions(lm, backend="eager", fused_experts=False)
    assert_same_cache(extended(), want)


def test_kept_prompts_are_kept_apart_by_the_encoders_form(lm):
    prompts = lm.fast_tier.prompts
    encoded_prompt(lm, PROMPT, 1)
    compile_regions(lm, backend="eager")
    assert lm.fast_tier.encoder_form == "compiled"
    encoded_prompt(lm, PROMPT, 1)
    assert (prompts.hits, prompts.misses) == (0, 2)  # the eager encoder's cache was not handed out
    uncompile_regions(lm)
    assert lm.fast_tier.encoder_form == "eager" and lm.fast_tier.compiled_encoder_layers == []
    assert "forward" not in vars(encoder_layers(lm.model)[0].experts)
    encoded_prompt(lm, PROMPT, 1)
    assert (prompts.hits, prompts.misses) == (1, 2)


def test_the_encoder_can_be_left_uncompiled(lm):
    compile_regions(lm, backend="eager", encoder=False)
    assert lm.fast_tier.compiled and lm.fast_tier.compiled_encoder_layers == []
    assert lm.fast_tier.encoder_form == "eager"


@pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_TRITON), reason="needs CUDA and Triton")
def test_the_inductor_compiled_encoder_writes_the_cache_within_bf16_rounding_on_gpu():
    """What ``--compile`` runs (Inductor, the fused experts and router ops) on a bf16 model: every
    cache layer within compounded bf16 rounding of the library's encoder (relative Frobenius
    error), the sliding layers' tail included.
    The routers' weights are scaled up so that no two experts come near a tie, where either form
    may rightly choose another expert and the layers after it differ by more than rounding."""
    from dataclasses import replace

    model = tiny_random_model(canvas_length=16, num_layers=6, sliding_window=8, seed=3)
    model.model.to("cuda", torch.bfloat16)
    model = replace(model, device=torch.device("cuda"), dtype=torch.bfloat16)
    with torch.no_grad():
        for layer in model.model.model.decoder.layers:  # the encoder's routers share these weights
            layer.router.proj.weight.mul_(50.0)
        want = [(k.float(), v.float()) for k, v in encode(model, PROMPT)]
        compile_regions(model)
        try:
            got = [(k.float(), v.float()) for k, v in encode(model, PROMPT)]
        finally:
            uncompile_regions(model)
    errors = []
    for index, ((keys, values), (want_keys, want_values)) in enumerate(zip(got, want)):
        assert keys.shape == want_keys.shape and values.shape == want_values.shape, f"layer {index}"
        errors.append(max(float((keys - want_keys).norm() / want_keys.norm()),
                          float((values - want_values).norm() / want_values.norm())))
    # bf16 rounding compounds from layer to layer through the random model (one ulp is 0.4 %; on an
    # H200: 0.3, 1.1, 1.7, 2.6, 4.3, 7.9 % for layers 0 to 5); a wrong layer, a missing write or a
    # wrong sliding tail is off by order one (the CPU tests above check the wiring bit for bit)
    assert errors[0] <= 0.01 and max(errors) <= 0.15, errors
