"""Apple MPS: runs only where PyTorch sees an MPS device (skipped elsewhere, e.g. in CI).
Not yet run on Apple hardware by this project."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from petri.core.dish import Dish
from petri.engine.seeding import seed_dish
from petri.engine.torch.device import mps_available
from petri.engine.torch.model import load_model

pytestmark = pytest.mark.skipif(not mps_available(), reason="no Apple MPS device on this machine")


def test_auto_picks_mps_with_fp16():
    lm = load_model(device="auto")
    assert lm.device.type == "mps" and lm.dtype == torch.float16


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_embedded_model_samples_on_mps(dtype):
    lm = load_model(device="mps", dtype=dtype)
    dish = Dish(("order", "inventory", "person"), "Only 90 units are in stock, but the customer ordered 120.")
    traj = seed_dish(lm, dish, 3, lm.default_settings(), seed=0)
    for s, spans in enumerate(traj.anchors):
        for span in spans:
            np.testing.assert_array_equal(traj.final_ids[s, span.start : span.end], span.token_ids)
    assert np.isfinite(traj.entropy[traj.argmax >= 0]).all()


def test_mps_logits_match_the_cpu():
    cpu, mps = load_model(device="cpu"), load_model(device="mps", dtype="fp32")
    prompt = torch.tensor([cpu.tokenizer.encode("Event: the order was shipped.")])
    canvas = torch.randint(0, cpu.vocab_size, (1, cpu.canvas_length), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = cpu.model(input_ids=prompt, decoder_input_ids=canvas).logits
        got = mps.model(input_ids=prompt.to("mps"), decoder_input_ids=canvas.to("mps")).logits.cpu()
    assert torch.allclose(got, expected, atol=1e-3), (got - expected).abs().max()
