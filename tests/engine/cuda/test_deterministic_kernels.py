"""The compiled tier in Inductor's deterministic mode (issue 25, petri.engine.torch.decoder_hooks.compile_function).

Why: on an H200 the fp8-fast tier's tokens for a seed depended on what the process had compiled
before (a batch-2 forward before the batch-3 one changed 100 of 576 argmax values,
``experiments/compile_history.py``): Inductor compiled the layers again with dynamic shapes and
picked the new kernels' configurations by timing them, and those configurations round differently.
In its deterministic mode nothing that changes the numbers is picked by timing.

On the CPU: every compile of the compiled tier (decoder layers, prompt encoder layers, the
overlapped MLP, the whole-model compile) asks Inductor for that mode, and only Inductor; switched
off, the trajectories say ``+autotuned`` and the kept prompts are keyed apart. On a GPU (skipped
elsewhere): the fp8-fast tier's logits and seeds are the same fresh as after another batch first.
"""

from __future__ import annotations

import pytest
import torch

from experiment_support import experiment_script
from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.torch import decoder_hooks
from petri.engine.torch.decoder_hooks import compile_function, inductor_deterministic_available
from petri.engine.torch.model import compile_for_sampling
from petri.engine.torch.tiny import tiny_random_model

HAVE_MODE = inductor_deterministic_available()


@pytest.fixture
def compiles(monkeypatch):
    """The (backend, options) of every torch.compile the engine makes; nothing is compiled."""
    seen = []

    def spy(function, backend="inductor", options=None, **kwargs):
        seen.append((backend, options))
        return function

    monkeypatch.setattr(decoder_hooks.torch, "compile", spy)
    return seen


@pytest.mark.skipif(not HAVE_MODE, reason="this torch's Inductor has no deterministic mode")
def test_compile_function_asks_inductor_and_only_inductor_for_the_mode(compiles):
    compile_function(len, "inductor")
    compile_function(len, "inductor", deterministic=False)
    compile_function(len, "eager")
    assert compiles == [("inductor", {"deterministic": True}), ("inductor", None), ("eager", None)]


@pytest.mark.skipif(not HAVE_MODE, reason="this torch's Inductor has no deterministic mode")
@pytest.mark.parametrize("overlapped", [False, True])
def test_every_compile_of_the_compiled_tier_is_deterministic(compiles, overlapped):
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=3, dtype=torch.bfloat16)
    compile_regions(lm, overlapped_mlp=overlapped)
    decoder, encoder = lm.model.model.decoder.layers, decoder_hooks.encoder_layers(lm.model)
    # one compile per decoder and encoder layer, and one for the overlapped MLP
    assert len(compiles) == len(decoder) + len(encoder) + overlapped
    assert all(backend == "inductor" and options == {"deterministic": True} for backend, options in compiles)
    assert not lm.fast_tier.autotuned_kernels
    assert "+autotuned" not in lm.fast_tier.fast_name(1)
    uncompile_regions(lm)


def test_the_whole_model_compile_is_deterministic_too(compiles):
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=3, dtype=torch.bfloat16)
    compile_for_sampling(lm, regional=False)
    assert compiles == [("inductor", {"deterministic": True} if HAVE_MODE else None)]


def test_autotuned_kernels_are_named_and_keyed_apart(compiles):
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=3, dtype=torch.bfloat16)
    compile_regions(lm)
    deterministic_form = lm.fast_tier.encoder_form
    uncompile_regions(lm)
    compile_regions(lm, deterministic_kernels=False)
    assert all(options is None for _, options in compiles[-4:])
    assert lm.fast_tier.autotuned_kernels
    assert lm.fast_tier.fast_name(1).startswith("fast+compiled") and lm.fast_tier.fast_name(1).endswith("+autotuned")
    assert lm.fast_tier.encoder_form != deterministic_form
    uncompile_regions(lm)
    assert not lm.fast_tier.autotuned_kernels and lm.fast_tier.encoder_form == "eager"


def test_the_eager_backend_is_not_autotuned(compiles):
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=3, dtype=torch.bfloat16)
    compile_regions(lm, backend="eager", deterministic_kernels=False)
    assert not lm.fast_tier.autotuned_kernels and all(backend == "eager" for backend, _ in compiles)
    uncompile_regions(lm)


# ---- on a GPU ------------------------------------------------------------------------------------

@pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_TRITON and HAVE_MODE),
                    reason="needs CUDA, Triton and Inductor's deterministic mode")
def test_the_fp8_fast_tier_s_tokens_do_not_depend_on_what_was_compiled_before():
    """The probe's two histories (a reset Dynamo meeting only batch 3; one meeting batch 2 first),
    the tier as it compiles by default: the batch-3 logits and the seeds' argmax bit-equal. (With
    ``deterministic_kernels=False`` an H200 gave 100 of 576 argmax values apart.)"""
    history = experiment_script("compile_history")  # its tiny model and histories
    lm = history.tiny("cuda", "fp8-fast")
    fresh = history.one_history(lm, False, False)
    after = history.one_history(lm, False, True)
    assert torch.equal(fresh["logits"], after["logits"])
    assert all((a == b).all() for a, b in zip(fresh["argmax"], after["argmax"]))
