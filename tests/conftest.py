"""Shared fixtures: a tiny random DiffusionGemma (built in-process, no files)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from petri.tiny import tiny_random_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_lm():
    """A 2-layer random DiffusionGemma with a 16-token canvas and a 384-token BPE vocabulary."""
    return tiny_random_model(canvas_length=16)


@pytest.fixture(scope="session")
def confident_lm():
    """Like ``tiny_lm`` but with a sharpened output head, so entropies get low enough for the
    adaptive stop to fire at different steps in different samples."""
    import torch

    lm = tiny_random_model(canvas_length=16)
    with torch.no_grad():
        lm.model.lm_head.weight.mul_(8.0)
    return lm
