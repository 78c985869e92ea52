"""A model put on the card inside each ZeroGPU call (petri/engine/torch/card_placement.py): the tier
for a card size, worked by hand from tier_memory's estimate; placement once per process, anew in a
forked child; the move itself (to the meta device, standing in for CUDA on this CPU)."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from petri.engine.torch import card_placement
from petri.engine.torch.card_placement import ZEROGPU_CARDS, CardPlacement, card_tier, place_on_card
from petri.engine.torch.tier_memory import Tier, TierMemoryError, WeightCounts
from petri.engine.torch.tiny import tiny_random_model

GIB = 2**30
#: The full-size architecture's sizes as tier_memory's docstring counts them: 25.25 B parameters in
#: bf16, the FP8 tier quantizing 23.5 GiB of elements; a 262,144-token vocabulary, hidden 2,816, canvas 256.
FULL = WeightCounts(weight_bytes=int(47.03 * GIB), quantized=int(23.5 * GIB), quantized_rows=10**7,
                    lm_head=262_144 * 2816, element_bytes=2, vocab=262_144, hidden=2816, canvas=256)


def test_the_full_size_model_runs_in_bf16_on_a_whole_card():
    # usable: 96e9 - 1 GiB - 2 % = 93.0e9 B; bf16 uncompiled at 12 x 1,600: 50.5e9 weights + 0.6 GiB
    # + 4.5 x (12*256*262144*4 = 3.22e9) + 1,600 x 0.66 MiB = 16.3e9 workspace = 66.8e9: it fits
    assert card_tier(FULL, "xlarge") == Tier(compiled=False, precision="bf16")


def test_the_full_size_model_fits_no_tier_on_half_a_card_and_the_error_names_the_card():
    # usable: 48e9 - 1 GiB - 2 % = 45.97e9 B, less than the bf16 weights alone (50.5e9); every FP8
    # tier is made beside the bf16 weights, so none fits either
    with pytest.raises(TierMemoryError, match="ZeroGPU large card"):
        card_tier(FULL, "large")


def test_a_small_model_runs_in_bf16_on_half_a_card():
    small = WeightCounts(weight_bytes=GIB, quantized=GIB // 4, quantized_rows=1000, lm_head=1000, element_bytes=2,
                         vocab=8192, hidden=512, canvas=64)
    assert card_tier(small, "large").precision_text == "bf16"


def test_an_unknown_card_size_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="size: 'medium'"):
        card_tier(FULL, "medium")
    assert set(ZEROGPU_CARDS) == {"large", "xlarge"}


def test_a_model_already_there_in_bf16_is_used_as_it_is():
    lm = tiny_random_model()
    assert place_on_card(lm, "cpu") is lm


def test_the_fp8_tier_off_cuda_is_refused_naming_precision():
    with pytest.raises(ValueError, match="precision: 'fp8' needs a CUDA card"):
        place_on_card(tiny_random_model(), "cpu", "fp8")


def test_placing_moves_the_weights_and_makes_a_fresh_tier_for_the_new_device():
    lm = tiny_random_model()
    placed = place_on_card(lm, "meta")  # meta stands in for cuda: a real move of every weight, no GPU
    assert placed is not lm and placed.device == torch.device("meta")
    assert {p.device.type for p in placed.model.parameters()} == {"meta"}
    assert placed.fast_tier is not lm.fast_tier and placed.fast_tier.model is placed.model
    assert placed.model_id == lm.model_id and placed.tokenizer is lm.tokenizer


def _count_places(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setattr(card_placement, "place_on_card", lambda lm, device, precision: calls.append(lm) or ("placed", lm))
    return calls


def test_a_process_places_once_and_reuses_the_placed_model(monkeypatch):
    calls = _count_places(monkeypatch)
    placement, lm = CardPlacement("cuda"), object()
    assert placement.model(lm) is placement.model(lm)
    assert len(calls) == 1




def test_a_forked_child_places_again_rather_than_trust_its_parents_placement(monkeypatch):
    calls = _count_places(monkeypatch)
    placement, lm = CardPlacement("cuda"), object()
    placement.model(lm)
    calls_in_child = multiprocessing.get_context("fork").Pipe(duplex=False)
    recv, send = calls_in_child

    def child() -> None:
        placement.model(lm)
        send.send(len(calls))  # the child's own list: the parent's one call plus its own
        send.close()

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    assert recv.recv() == 2
    process.join(10)
    assert process.exitcode == 0 and len(calls) == 1


def test_on_zerogpu_the_main_process_loads_on_the_cpu_in_bf16_uncompiled(monkeypatch):
    pytest.importorskip("pydantic")  # the web layer reads the configuration; the GPU machine's image has no pydantic
    import argparse

    from petri.web import gpu_executor

    args = argparse.Namespace(model="m", device="cuda", dtype="auto", compile=True, precision="fp8-fast", backend="auto")
    assert gpu_executor.host_model_args(args) is args  # off ZeroGPU: as given
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    host = gpu_executor.host_model_args(args)
    assert (host.device, host.dtype, host.compile, host.precision) == ("cpu", "bfloat16", False, "bf16")
    assert (host.model, host.backend) == ("m", "auto") and args.device == "cuda"


def test_on_zerogpu_a_diffusion_gemma_is_placed_in_the_tier_of_the_card_size(monkeypatch):
    pytest.importorskip("pydantic")  # the web layer reads the configuration; the GPU machine's image has no pydantic
    from petri.web import gpu_executor

    lm = tiny_random_model()
    assert gpu_executor.zerogpu_placement(lm, "large") == CardPlacement("cuda", "bf16")
    with pytest.raises(ValueError, match="size: 'huge'"):
        gpu_executor.zerogpu_placement(lm, "huge")
