"""experiments/bench.py --release-fp8 (issue 62) on a tiny bf16 model on the CPU: an FP8 configuration
runs released with the encoder in FP8, fp8 ↔ fp8-fast can follow, bf16 cannot."""

from __future__ import annotations

import pytest
import torch

from experiment_support import experiment_script
from petri.engine.torch.tiny import tiny_random_model


def test_release_fp8_modes(monkeypatch):
    bench = experiment_script("bench")
    monkeypatch.setattr(bench, "_release_fp8", [True])
    monkeypatch.setattr(bench, "_current_layers", [None])
    lm = tiny_random_model(canvas_length=16, seed=2, dtype=torch.bfloat16)
    bench.set_model_mode(lm)  # bf16 first: nothing released
    assert not lm.fast_tier.released_bf16
    bench.set_model_mode(lm, precision="fp8")
    experts = lm.model.model.decoder.layers[0].experts
    assert lm.fast_tier.released_bf16 and lm.fast_tier.fp8_encoder and experts.gate_up_proj.numel() == 0
    bench.set_model_mode(lm, precision="fp8-fast")
    assert lm.fast_tier.precision == "fp8-fast" and experts._petri_fp8_fast
    with pytest.raises(ValueError, match="precision"):
        bench.set_model_mode(lm)
