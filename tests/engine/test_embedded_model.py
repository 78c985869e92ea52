"""The shipped models: petri-small (assets/petri-small) is the default, it loads on the CPU, and it
denoises into English words (a random model would not); petri-tiny stays loadable by its name; the
model card carries the figures of the committed benchmark run."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from petri.core.dish import Dish
from petri.engine.seeding import seed_dish
from petri.engine.torch.model import EMBEDDED_MODEL_PATH, default_model_name, load_model


@pytest.fixture(scope="module")
def embedded():
    return load_model(device="cpu")


def test_embedded_model_is_the_cpu_default(embedded):
    assert default_model_name() == str(EMBEDDED_MODEL_PATH) or default_model_name().startswith("google/")
    assert embedded.model_id == "petri-small"
    assert embedded.canvas_length == 64 and embedded.vocab_size == 8192
    assert sum(p.stat().st_size for p in EMBEDDED_MODEL_PATH.iterdir()) < 60 * 10**6  # issue 47's asset bound


def test_the_first_embedded_model_stays_available_by_name():
    tiny = load_model("petri-tiny", device="cpu")
    assert tiny.model_id == "petri-tiny" and tiny.vocab_size == 4096


def test_model_card_figures_come_from_its_training_run():
    metrics = json.loads((EMBEDDED_MODEL_PATH / "metrics.json").read_text())
    ce = metrics["heldout_canvas_ce"]
    assert ce["0.25"] < ce["0.5"] < ce["0.75"] < ce["1.0"]
    assert ce["0.5"] < metrics["unigram_entropy_nats"] - 2.0, "at t=0.5 the model must beat unigram clearly"


def test_embedded_model_writes_english_around_the_anchors(embedded):
    dish = Dish(("order", "inventory", "person"), "Only 90 units are in stock, but the customer ordered 120.")
    settings = replace(embedded.default_settings(), max_denoising_steps=16)
    traj = seed_dish(embedded, dish, 2, settings, seed=0)
    assert traj.model_id == "petri-small"
    words = re.findall(r"[A-Za-z]+", " ".join(traj.final_texts))
    common = {"the", "a", "an", "of", "to", "is", "in", "or", "and", "that", "for", "as", "by", "with", "who"}
    share_common = sum(w.lower() in common for w in words) / len(words)
    # Measured on petri-tiny, the first default: 38 % function words in a 12-sample seed; 0.8 % in
    # uniformly random tokens of its vocabulary (12,800 tokens, numpy seed 0).
    assert share_common > 0.12, traj.final_texts


BENCH = EMBEDDED_MODEL_PATH.parent.parent / "experiments" / "results" / "subject_bench.json"


@pytest.mark.parametrize("name, key", [("petri-small", "assets/petri-small"), ("petri-small-mdm", "assets/petri-small-mdm")])
def test_model_cards_carry_the_committed_benchmark(name, key):
    """Each small model's card shows the figures of experiments/results/subject_bench.json, its own row
    and the reference lines (the teacher's own answers, petri-tiny)."""
    if not BENCH.exists():
        pytest.skip("experiments/results/subject_bench.json is not in this install")
    models = json.loads(BENCH.read_text())["models"]
    card = (EMBEDDED_MODEL_PATH.parent / name / "README.md").read_text()
    for row in (key, "teacher (own answers)", "petri-tiny"):
        assert f"| {models[row]['teacher_nll']:.2f} | {100 * models[row]['dictionary_words']:.1f} % |" in card, row
    assert f"| {models[key]['flips_per_free_position']:.2f} |" in card


def test_the_small_masked_model_loads_by_name():
    mdm = load_model("petri-small-mdm", device="cpu")
    assert mdm.model_id == "petri-small-mdm" and mdm.family == "masked-diffusion" and mdm.canvas_length == 64
