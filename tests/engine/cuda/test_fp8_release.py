"""The FP8 tier without its bf16 copies (petri.engine.cuda.fp8_tier.fp8_release, issue 62), on a tiny bf16 model on
the CPU (the tier's dequantizing reference products): the same logits and trajectories as the FP8 tier
with the encoder in FP8 and the copies kept, the bytes freed counted by hand, refusals named."""

from __future__ import annotations

import pytest
import torch

from petri.core.trajectory import AnchorSpan, SamplerSettings
from petri.engine.base import SampleRequest
from petri.engine.cuda.fp8_tier.fp8 import set_precision
from petri.engine.cuda.fp8_tier.fp8_release import release_bf16, released_tensors, set_accumulation
from petri.engine.torch.model import compile_for_sampling
from petri.engine.torch.tiny import tiny_random_model
from tiny_support import tiny_logits


def fresh(compiled: bool = False):
    lm = tiny_random_model(canvas_length=16, seed=5, dtype=torch.bfloat16)
    if compiled:  # the compiled tier's stacked projections (backend eager: traced, not compiled)
        compile_for_sampling(lm, backend="eager")
    return lm


def parameter_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def hand_counted_release(model) -> int:
    """The bf16 bytes release_bf16 should free, counted from the config: per decoder layer q, k, v, o,
    the dense MLP's gate, up, down, the experts' gate/up and down; the self-conditioning MLP."""
    text = model.config.text_config
    hidden, inter, experts, width = text.hidden_size, text.intermediate_size, text.num_experts, text.moe_intermediate_size
    total = 0
    for layer in model.model.decoder.layers:
        attn = layer.self_attn
        total += sum(m.weight.numel() for m in (attn.q_proj, attn.k_proj, attn.o_proj)
                     + ((attn.v_proj,) if getattr(attn, "v_proj", None) is not None else ()))
        total += 3 * hidden * inter + experts * (2 * width * hidden + hidden * width)
    sc = model.model.decoder.self_conditioning
    total += sum(m.weight.numel() for m in (sc.gate_proj, sc.up_proj, sc.down_proj))
    return 2 * total


@pytest.mark.parametrize("compiled", [False, True], ids=["exact", "stacked"])
def test_release_frees_the_quantized_bf16_and_keeps_the_logits(compiled):
    lm = fresh(compiled)
    expected_freed = hand_counted_release(lm.model)
    fingerprint = lm.fingerprint()
    set_precision(lm, "fp8", fp8_encoder=True)
    kept = tiny_logits(lm)
    before = parameter_bytes(lm.model)
    freed = release_bf16(lm)
    assert freed == expected_freed
    assert lm.fingerprint() == fingerprint  # the weights as loaded (a study's run id does not change)
    assert before - parameter_bytes(lm.model) == expected_freed
    assert torch.equal(tiny_logits(lm), kept)  # FP8 copies only: the same products
    embedding = lm.model.get_input_embeddings().weight
    assert embedding.numel() > 0 and lm.model.lm_head.weight is embedding  # the LM head is the embedding
    router = lm.model.model.decoder.layers[0].router.proj.weight
    assert router.numel() > 0 and all(t.numel() == 0 for t in released_tensors(lm.model))


def test_release_samples_the_same_trajectory():
    request = SampleRequest([5, 9, 17], [[AnchorSpan("a", 3, (11,))]] * 2, SamplerSettings(max_denoising_steps=4), seed=3)
    lm = fresh()
    set_precision(lm, "fp8-fast", fp8_encoder=True)
    kept = lm.sample(request)
    release_bf16(lm)
    released = lm.sample(request)
    assert released.sampler == kept.sampler and "+enc-fp8" in released.sampler
    assert (released.final_ids == kept.final_ids).all() and (released.argmax == kept.argmax).all()


def test_release_is_refused_without_the_fp8_tier_or_the_fp8_encoder():
    lm = fresh()
    with pytest.raises(ValueError, match="needs the FP8 tier on"):
        release_bf16(lm)
    set_precision(lm, "fp8")
    with pytest.raises(ValueError, match=r"needs \+enc-fp8"):
        release_bf16(lm)
    assert all(t.numel() > 0 for t in released_tensors(lm.model))  # nothing freed by a refusal


def test_a_released_model_stays_in_its_tier():
    lm = fresh()
    set_precision(lm, "fp8", fp8_encoder=True)
    release_bf16(lm)
    for change in (lambda: set_precision(lm, "bf16"), lambda: set_precision(lm, "fp8-fast"),
                   lambda: compile_for_sampling(lm, backend="eager")):
        with pytest.raises(ValueError, match="released"):
            change()
    set_precision(lm, "fp8", fp8_encoder=True)  # the tier it is in: nothing to do


def test_a_released_model_switches_accumulation_without_its_bf16():
    lm = fresh()
    set_precision(lm, "fp8", fp8_encoder=True)
    release_bf16(lm)
    set_accumulation(lm, "fp8-fast")
    flagged = [m for m in lm.model.modules() if "_petri_fp8_fast" in vars(m)]
    assert lm.device_type == "cpu-enc-fp8-fp8-fast" and len(flagged) > 5 and all(m._petri_fp8_fast for m in flagged)
    reference = fresh()  # the same weights, put straight into fp8-fast with the encoder in FP8
    set_precision(reference, "fp8-fast", fp8_encoder=True)
    assert torch.equal(tiny_logits(lm), tiny_logits(reference))
    set_accumulation(lm, "fp8")
    assert lm.device_type == "cpu-enc-fp8-fp8" and not any(m._petri_fp8_fast for m in flagged)
    with pytest.raises(ValueError, match="precision"):
        set_accumulation(lm, "bf16")
