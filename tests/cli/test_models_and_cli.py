"""Loading checkpoints from folders, the clear missing-model error, and the CLI end to end
(tiny random model saved to a folder → ``python -m petri seed`` → tidy CSVs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from petri.engine.torch.device import resolve_device, resolve_dtype
from petri.engine.torch.model import ModelNotFoundError, load_model, settings_from_generation_config
from petri.engine.torch.tiny import tiny_random_model
from tiny_support import save_checkpoint

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        DiffusionGemmaGenerationConfig,
        EntropyBoundSamplerConfig,
    )

    lm = tiny_random_model(canvas_length=16, seed=1)
    folder = tmp_path_factory.mktemp("ckpt") / "tiny-ckpt"
    lm.model.generation_config = DiffusionGemmaGenerationConfig(
        max_denoising_steps=5, sampler_config=EntropyBoundSamplerConfig(entropy_bound=3.0), t_min=0.4, t_max=0.8,
        stability_threshold=1, confidence_threshold=0.005, max_new_tokens=16,
    )
    save_checkpoint(lm, folder)
    return folder, lm


def test_load_checkpoint_folder_roundtrip(tiny_checkpoint):
    folder, original = tiny_checkpoint
    lm = load_model(folder, device="cpu")
    assert lm.model_id == "tiny-ckpt" and lm.dtype == torch.float32 and lm.canvas_length == 16
    settings = lm.default_settings()
    assert settings.max_denoising_steps == 5 and settings.entropy_bound == 3.0
    for (name, a), (_, b) in zip(original.model.state_dict().items(), lm.model.state_dict().items()):
        assert torch.equal(a, b), name


def test_missing_model_is_one_clear_message(tmp_path):
    with pytest.raises(ModelNotFoundError) as err:
        load_model(tmp_path / "no-such-folder", device="cpu")
    assert "huggingface-cli download" in str(err.value) and "never downloads" in str(err.value)
    with pytest.raises(ModelNotFoundError, match="not in the local Hugging Face cache"):
        load_model("nobody/not-a-cached-model", device="cpu")


def test_device_and_dtype_rules():
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("mps")) == torch.float16
    assert resolve_dtype("bf16", cpu) == torch.bfloat16
    with pytest.raises(ValueError, match="dtype='int8'"):
        resolve_dtype("int8", cpu)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")
        assert resolve_device("auto").type in {"cpu", "mps"}


def test_settings_fall_back_to_diffusiongemma_defaults():
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import DiffusionGemmaGenerationConfig

    settings = settings_from_generation_config(DiffusionGemmaGenerationConfig())
    assert (settings.max_denoising_steps, settings.entropy_bound, settings.t_min, settings.t_max) == (48, 0.1, 0.4, 0.8)


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "petri", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_cli_seed_end_to_end(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint
    out = tmp_path / "run"
    result = run_cli(
        "seed", "--event", "Only 90 units are in stock, but 120 were ordered.", "--concepts", "order,inventory,person",
        "--samples", "6", "--model", str(folder), "--out", str(out), "--seed", "4",
    )
    assert result.returncode == 0, result.stderr
    assert "model: tiny-ckpt" in result.stdout
    assert "inventory|order" in result.stdout and "inventory|person" in result.stdout
    positions = pd.read_csv(out / "positions.csv")
    samples = pd.read_csv(out / "samples.csv")
    segments = pd.read_csv(out / "segments.csv")
    assert len(positions) == 6 * 16 and len(samples) == 6
    assert len(segments) == 6 * 2  # three anchors → two segments per sample
    assert set(positions["model_id"]) == {"tiny-ckpt"}
    meta = json.loads((out / "run.json").read_text())
    assert meta["model_id"] == "tiny-ckpt" and meta["settings"]["max_denoising_steps"] == 5
    assert meta["events"][0]["seed"] == 4 and "transformers" in meta["versions"]
    assert meta["sampler"] == "eager"  # the CPU runs the torch sampler that reproduces generate


def test_cli_names_the_bad_concept(tiny_checkpoint):
    folder, _ = tiny_checkpoint
    result = run_cli("seed", "--event", "x", "--concepts", "order,,person", "--model", str(folder))
    assert result.returncode == 2
    assert "empty concept" in result.stderr and "Traceback" not in result.stderr


def test_compile_option_is_a_tri_state_and_auto_compiles_only_cuda(tiny_checkpoint, monkeypatch):
    """``--compile`` / ``--no-compile`` / neither (auto: on with CUDA and Triton, so never on this
    CPU) reach ModelSpec, and ModelSpec.load compiles exactly when it should."""
    import argparse

    from petri.app import model_options
    from petri.engine.torch import model as torch_model
    from petri.study.execution.executors import ModelSpec

    folder, _ = tiny_checkpoint
    from petri.core.config import ConfigError, PetriConfig

    parser = argparse.ArgumentParser()
    model_options.add_model_arguments(parser)
    compiles = [model_options.spec_from_args(parser.parse_args(argv)).compile for argv in ([], ["--compile"], ["--no-compile"])]
    assert compiles == [None, True, False]
    for value, expected in (("0", False), ("yes", True), ("No", False), ("TRUE", True), ("", None)):
        parser = argparse.ArgumentParser()
        model_options.add_model_arguments(parser, PetriConfig.from_env({"PETRI_COMPILE": value}))
        assert parser.parse_args([]).compile is expected
    assert parser.parse_args(["--compile"]).compile is True  # the flag wins over the environment
    with pytest.raises(ConfigError, match="^PETRI_COMPILE: got 'maybe'; expected 1 / true / yes or 0 / false / no"):
        PetriConfig.from_env({"PETRI_COMPILE": "maybe"})  # was read as unset before the configuration object

    compiled = []
    monkeypatch.setattr(torch_model, "compile_for_sampling", lambda lm: compiled.append(lm) or lm)
    lm = ModelSpec(str(folder), device="cpu").load()
    assert not torch_model.compiles_by_default(lm) and compiled == []
    ModelSpec(str(folder), device="cpu", compile=True).load()
    assert len(compiled) == 1
    monkeypatch.setattr(torch_model, "compiles_by_default", lambda lm: True)  # as on a CUDA machine
    ModelSpec(str(folder), device="cpu").load()
    ModelSpec(str(folder), device="cpu", compile=False).load()
    assert len(compiled) == 2


def test_a_failing_compiled_tier_falls_back_to_the_plain_fast_path(tiny_lm, monkeypatch, caplog):
    """When the compiled tier fails (compilation or capture), the sampler uncompiles the model, says
    why in the log and serves the request with the uncompiled fast path."""
    import copy
    from dataclasses import replace

    from petri.core.trajectory import SamplerSettings
    from petri.engine.base import SampleRequest
    from petri.engine.cuda import fast_sampler
    from petri.engine.torch.model import compile_for_sampling

    lm = compile_for_sampling(replace(tiny_lm, model=copy.deepcopy(tiny_lm.model)), backend="eager")
    real = fast_sampler.sample_fast
    calls = []

    def fast(lm, *args, **kwargs):
        calls.append(lm.fast_tier.compiled)
        if lm.fast_tier.compiled:
            raise RuntimeError("Inductor could not compile")
        return real(lm, *args, **kwargs, options=fast_sampler.FastOptions(graph=False, fused=False))

    monkeypatch.setattr(fast_sampler, "fast_path_reason", lambda lm, options=None: None)  # as on CUDA
    monkeypatch.setattr(fast_sampler, "sample_fast", fast)
    settings = SamplerSettings(max_denoising_steps=3)
    trajectory = fast_sampler.run_sampler_auto(lm, SampleRequest([5, 6, 7], [[], []], settings, seed=1))
    assert calls == [True, False] and trajectory is not None and trajectory.argmax.shape[:2] == (2, 3)
    assert "Inductor could not compile" in caplog.text
    assert not lm.fast_tier.compiled
    assert all("forward" not in vars(layer.experts) for layer in lm.model.model.decoder.layers)
