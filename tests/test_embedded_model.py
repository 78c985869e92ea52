"""The shipped model in assets/petri-tiny: it is the default, it loads on the CPU, and it denoises
into English words (a random model would not)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from petri.dish import Dish
from petri.engine.torch_model import EMBEDDED_MODEL_PATH, default_model_name, load_model
from petri.engine.seeding import seed_dish


@pytest.fixture(scope="module")
def embedded():
    return load_model(device="cpu")


def test_embedded_model_is_the_cpu_default(embedded):
    assert default_model_name() == str(EMBEDDED_MODEL_PATH) or default_model_name().startswith("google/")
    assert embedded.model_id == "petri-tiny"
    assert embedded.canvas_length == 64 and embedded.vocab_size == 4096
    assert sum(p.stat().st_size for p in EMBEDDED_MODEL_PATH.iterdir()) < 40 * 2**20


def test_model_card_figures_come_from_its_training_run():
    metrics = json.loads((EMBEDDED_MODEL_PATH / "metrics.json").read_text())
    ce = metrics["heldout_canvas_ce"]
    assert ce["0.25"] < ce["0.5"] < ce["0.75"] < ce["1.0"]
    assert ce["0.5"] < metrics["unigram_entropy_nats"] - 2.0, "at t=0.5 the model must beat unigram clearly"


def test_embedded_model_writes_english_around_the_anchors(embedded):
    dish = Dish(("order", "inventory", "person"), "Only 90 units are in stock, but the customer ordered 120.")
    settings = replace(embedded.default_settings(), max_denoising_steps=16)
    traj = seed_dish(embedded, dish, 2, settings, seed=0)
    assert traj.model_id == "petri-tiny"
    words = re.findall(r"[A-Za-z]+", " ".join(traj.final_texts))
    common = {"the", "a", "an", "of", "to", "is", "in", "or", "and", "that", "for", "as", "by", "with", "who"}
    share_common = sum(w.lower() in common for w in words) / len(words)
    # Measured: 38 % function words in a 12-sample seed of this model; 0.8 % in uniformly random
    # tokens of its vocabulary (12,800 tokens, numpy seed 0).
    assert share_common > 0.12, traj.final_texts
