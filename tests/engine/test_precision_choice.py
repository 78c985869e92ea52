"""``--precision`` with the FP8 tier's opt-in levers (petri.engine.precision_choice, issue 25): the
text's grammar (hand-worked cases, every combination written out and read back, each error naming
the field), the command line's check before a model loads, and on the embedded model (CPU, bf16)
that the chosen tier is what runs: the FP8 encoder through ``load_backend_model`` and a sample's
sampler name, the FP8 self-conditioning in the compiled tier (traced, not compiled) and refused,
changing nothing, outside it."""

from __future__ import annotations

import argparse
import itertools

import pytest
import torch

from petri.app.model_options import add_model_arguments
from petri.core.trajectory import AnchorSpan, SamplerSettings
from petri.engine.base import SampleRequest
from petri.engine.cuda.compiled_tier import uncompile_regions
from petri.engine.cuda.fp8_tier.fp8 import precision_of, set_precision_choice
from petri.engine.precision_choice import PrecisionChoice, parse_precision
from petri.engine.select import load_backend_model
from petri.engine.torch.model import compile_for_sampling
from petri.engine.torch.tiny import tiny_random_model


@pytest.mark.parametrize("text, want", [
    ("bf16", PrecisionChoice("bf16", False, False)),
    ("fp8", PrecisionChoice("fp8", False, False)),
    ("fp8-fast+sc-fp8", PrecisionChoice("fp8-fast", True, False)),
    ("fp8+enc-fp8", PrecisionChoice("fp8", False, True)),
    ("fp8-fast+enc-fp8+sc-fp8", PrecisionChoice("fp8-fast", True, True)),  # levers in any order
    (" fp8-fast+sc-fp8 ", PrecisionChoice("fp8-fast", True, False)),
])
def test_hand_worked_texts(text, want):
    assert parse_precision(text) == want


def test_every_choice_written_out_reads_back():
    written = set()
    for precision, sc, enc in itertools.product(("fp8", "fp8-fast"), (False, True), (False, True)):
        choice = PrecisionChoice(precision, sc, enc)
        text = precision + ("+sc-fp8" if sc else "") + ("+enc-fp8" if enc else "")
        assert choice.text == text and parse_precision(text) == choice
        written.add(text)
    assert PrecisionChoice().text == "bf16" and len(written) == 8


@pytest.mark.parametrize("text, names", [
    ("fp16", "'fp16' is not one of bf16, fp8, fp8-fast"),
    ("fp8+sc-bf16", "unknown lever '+sc-bf16'"),
    ("fp8++sc-fp8", "unknown lever '+'"),
    ("fp8+sc-fp8+sc-fp8", "named twice"),
    ("bf16+enc-fp8", "need an FP8 precision"),
])
def test_errors_name_the_field_and_the_fault(text, names):
    with pytest.raises(ValueError, match="^precision: ") as error:
        parse_precision(text)
    assert names in str(error.value)


def test_the_command_line_checks_and_writes_out_the_text(capsys):
    parser = argparse.ArgumentParser(prog="petri")
    add_model_arguments(parser)
    assert parser.parse_args(["--precision", "fp8+enc-fp8+sc-fp8"]).precision == "fp8+sc-fp8+enc-fp8"
    assert parser.parse_args([]).precision == "bf16"
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "fp8+turbo"])
    assert "argument --precision: unknown lever '+turbo'" in capsys.readouterr().err


def test_the_environment_sets_the_default_and_is_checked_too(capsys):
    from petri.cli.main import main
    from petri.core.config import ConfigError, PetriConfig

    parser = argparse.ArgumentParser(prog="petri")
    add_model_arguments(parser, PetriConfig.from_env({"PETRI_PRECISION": "fp8-fast+enc-fp8"}))
    assert parser.parse_args([]).precision == "fp8-fast+enc-fp8"
    assert parser.parse_args(["--precision", "bf16"]).precision == "bf16"
    with pytest.raises(ConfigError, match="^PETRI_PRECISION: 'fp4' is not one of"):
        add_model_arguments(argparse.ArgumentParser(prog="petri"), PetriConfig.from_env({"PETRI_PRECISION": "fp4"}))
    # the command says so before it does anything, naming the variable
    assert main(["seed", "--event", "e", "--concepts", "a"], environ={"PETRI_PRECISION": "fp4"}) == 2
    assert capsys.readouterr().err.startswith("error: PETRI_PRECISION: 'fp4' is not one of")


def test_a_typo_fails_before_any_model_loads(monkeypatch):
    def load_model(*args, **kwargs):
        raise AssertionError("loaded a model for a precision that cannot be read")

    monkeypatch.setattr("petri.engine.torch.model.load_model", load_model)
    with pytest.raises(ValueError, match="unknown lever"):
        load_backend_model(None, backend="torch", device="cpu", dtype="bf16", precision="fp8+enc")
    with pytest.raises(ValueError, match="compile is off"):
        load_backend_model(None, backend="torch", device="cpu", dtype="bf16", compile=False, precision="fp8+sc-fp8")


def test_the_fp8_encoder_chosen_at_load_is_what_samples():
    lm = load_backend_model(None, backend="torch", device="cpu", dtype="bf16", compile=False, precision="fp8+enc-fp8")
    assert precision_of(lm) == "fp8" and lm.fast_tier.fp8_encoder_used
    settings = SamplerSettings(max_denoising_steps=2, stability_threshold=None, confidence_threshold=None)
    traj = lm.sample(SampleRequest([5, 9, 17], [[AnchorSpan("a", 1, (11,))]], settings, seed=0))
    assert traj.sampler.endswith("+enc-fp8+fp8")


@pytest.fixture()
def tiny():
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=1, dtype=torch.bfloat16)
    yield lm
    uncompile_regions(lm)


def test_fp8_self_conditioning_outside_the_compiled_tier_is_refused_and_changes_nothing(tiny):
    with pytest.raises(ValueError, match=r"\+sc-fp8 .*runs in the compiled tier only \(--compile\)"):
        set_precision_choice(tiny, parse_precision("fp8-fast+sc-fp8+enc-fp8"))
    assert precision_of(tiny) == "bf16" and not tiny.fast_tier.fp8_encoder
    assert not tiny.fast_tier.options.fp8_self_conditioning


def test_fp8_self_conditioning_in_the_compiled_tier_and_back(tiny):
    compile_for_sampling(tiny, backend="eager")
    set_precision_choice(tiny, parse_precision("fp8-fast+sc-fp8"))
    tier = tiny.fast_tier
    assert precision_of(tiny) == "fp8-fast" and tier.fp8_self_conditioning(tier.options)
    assert "+sc-fp8" in tier.fast_name(1) and tier.fast_name(1).endswith("+fp8-fast")
    assert tier.options.softmax_self_conditioning and tier.options.inverse_cdf_draw  # the compiled tier's kept
    set_precision_choice(tiny, PrecisionChoice())
    assert precision_of(tiny) == "bf16" and not tier.options.fp8_self_conditioning and not tier.fp8_encoder
    assert "+sc-fp8" not in tier.fast_name(1)
