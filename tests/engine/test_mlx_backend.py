"""The MLX backend against the torch backend.

(a) Same logits for the same prompt and canvas, with and without self-conditioning logits: fp32, max
    absolute difference ≤ ``LOGITS_ATOL`` (1e-4; logits are softcapped to ±30; measured ≈ 2e-6).
(b) Same trajectory with sampling noise removed: both samplers start from one given canvas, take the
    argmax instead of a multinomial draw and renoise from one fixed token stream
    (:class:`~petri.engine.fixed_noise.FixedNoise`); anchors pinned. The raw argmax at every step,
    the accept masks, the steps run and the final canvas must be equal; entropies within 1e-4.

The torch sampler (``petri/engine/torch/sampler.py``) has no noise-free mode of its own, so the test drives it,
unchanged, by standing in for ``torch.randint`` (first call: the start canvas; later calls: the
renoise stream) and ``torch.multinomial`` (argmax) while it runs.

Cases: tiny random models built in-process (the default tiny config; a short sliding window that the
prompt overflows; full-attention layers with their own head size and KV heads and distinct encoder /
decoder layer scalars) and the embedded checkpoint ``assets/petri-tiny`` when its weights exist.
MLX tests skip when ``mlx`` is not importable (CI installs ``mlx[cpu]`` from requirements-dev.txt).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from petri.core.dish import Dish, concept_token_ids, layout_samples
from petri.core.trajectory import SamplerSettings
from petri.engine.fixed_noise import FixedNoise
from petri.engine.select import BackendUnavailableError, mlx_available, select_backend
from petri.engine.torch.model import EMBEDDED_MODEL_PATH, LoadedModel, load_model
from petri.engine.torch.sampler import run_sampler
from petri.engine.torch.step import encode_prompt_once
from petri.engine.torch.tiny import build_tiny_tokenizer, tiny_random_model
from tiny_support import save_checkpoint

LOGITS_ATOL = 1e-4
ENTROPY_ATOL = 1e-4
REPO = Path(__file__).resolve().parents[2]

#: The checkpoint of the "embedded" cases; another folder can be checked the same way with
#: ``PETRI_MLX_PARITY_CHECKPOINT=/path/to/checkpoint python -m pytest tests/engine/test_mlx_backend.py``.
CHECKPOINT = Path(os.environ.get("PETRI_MLX_PARITY_CHECKPOINT", EMBEDDED_MODEL_PATH))

needs_mlx = pytest.mark.skipif(not mlx_available(), reason='mlx is not importable (pip install "mlx[cpu]")')
embedded_weights = pytest.mark.skipif(
    not any((CHECKPOINT / f).exists() for f in ("model.safetensors", "model.safetensors.index.json")),
    reason=f"the checkpoint has no weights yet ({CHECKPOINT / 'model.safetensors'})",
)


# ---------------------------------------------------------------------------------- models
def variant_model() -> LoadedModel:
    """Full-attention layers with their own head size (32 vs 16) and KV heads (1 vs 2), a 5-token
    sliding window, 6 experts top-3, and perturbed norms, router scales and layer scalars."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from petri.engine.torch.configs import MINIMAL_VISION_CONFIG

    tokenizer = build_tiny_tokenizer()
    vocab = len(tokenizer)
    text = dict(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "full_attention"], num_experts=6, top_k_experts=3,
        moe_intermediate_size=24, max_position_embeddings=512, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    config = DiffusionGemmaConfig(
        text_config=text, vision_config=dict(MINIMAL_VISION_CONFIG), canvas_length=12,
        image_token_id=vocab + 2, boi_token_id=vocab + 1, eoi_token_id=vocab + 3,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        model = DiffusionGemmaForBlockDiffusion(config).eval()
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" in name or "router" in name:
                    param.add_(torch.randn_like(param) * 0.3)
            for name, buffer in model.named_buffers():
                if name.endswith("layer_scalar"):
                    buffer.fill_(0.5 + torch.rand(1).item())
    return LoadedModel(
        model=model, tokenizer=tokenizer, model_id="tiny-variant", device=torch.device("cpu"), dtype=torch.float32
    )


def confident(lm: LoadedModel) -> LoadedModel:
    """Sharpen the output head so entropies get low enough for acceptance and the stop to act."""
    with torch.no_grad():
        lm.model.lm_head.weight.mul_(8.0)
    return lm


MODELS = {
    "tiny": lambda: tiny_random_model(canvas_length=16),
    "tiny-short-window": lambda: confident(tiny_random_model(canvas_length=16, sliding_window=6)),
    "variant": variant_model,
}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Per case: the torch model and the MLX model loaded from its saved checkpoint folder."""
    if not mlx_available():
        pytest.skip('mlx is not importable (pip install "mlx[cpu]")')
    from petri.engine.mlx.sampler import load_mlx_model

    built = {}
    for name, make in MODELS.items():
        lm = make()
        folder = tmp_path_factory.mktemp(name)
        save_checkpoint(lm, folder)
        built[name] = (lm, load_mlx_model(folder, dtype="float32"))
    return built


@pytest.fixture(scope="module")
def embedded_pair():
    from petri.engine.mlx.sampler import load_mlx_model

    return load_model(CHECKPOINT, device="cpu", dtype="float32"), load_mlx_model(CHECKPOINT, dtype="float32")


# ------------------------------------------------------------------------------ (a) logits
def logits_both(lm, mlm, prompt, canvas, self_conditioning=None):
    import mlx.core as mx

    batch, length = canvas.shape
    with torch.no_grad():
        cache = encode_prompt_once(lm, torch.tensor(np.asarray([prompt])))
        if batch > 1:
            cache.batch_repeat_interleave(batch)
        positions = torch.arange(len(prompt), len(prompt) + length, dtype=torch.int32)[None]
        ref = lm.model(
            decoder_input_ids=torch.tensor(canvas),
            cache=cache,
            decoder_position_ids=positions,
            self_conditioning_logits=None if self_conditioning is None else torch.tensor(self_conditioning),
        ).logits.numpy()
    got = mlm.model.decode(
        mx.array(canvas.astype(np.int32)),
        mlm.model.encode(prompt).repeat(batch),
        None if self_conditioning is None else mx.array(self_conditioning),
    )
    return ref, np.array(got)


def check_logits(lm, mlm, prompt_length, batch=3, seed=0):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, lm.vocab_size, prompt_length)
    canvas = rng.integers(0, lm.vocab_size, (batch, lm.canvas_length))
    self_conditioning = (rng.normal(size=(batch, lm.canvas_length, lm.vocab_size)) * 4).astype(np.float32)
    diffs = []
    for sc in (None, self_conditioning):
        ref, got = logits_both(lm, mlm, prompt, canvas, sc)
        assert got.shape == ref.shape == (batch, lm.canvas_length, lm.vocab_size)
        assert got.dtype == np.float32
        diff = float(np.abs(ref - got).max())
        assert diff <= LOGITS_ATOL, f"max |logits diff| {diff:.2e} > {LOGITS_ATOL}"
        diffs.append(diff)
    return diffs


@needs_mlx
@pytest.mark.parametrize("case", list(MODELS))
def test_same_logits_tiny(pairs, case):
    lm, mlm = pairs[case]
    check_logits(lm, mlm, prompt_length=20)


@needs_mlx
@embedded_weights
def test_same_logits_embedded(embedded_pair):
    lm, mlm = embedded_pair
    # longer than the sliding window, so the sliding layers' cache is cut as transformers cuts it
    window = int(lm.model.config.text_config.sliding_window)
    check_logits(lm, mlm, prompt_length=window + 17, batch=2)


# ------------------------------------------------------------------- (b) noise-free trajectory
@contextmanager
def torch_driven_by(fixed: FixedNoise, vocab: int):
    """Make petri.engine.torch.sampler's random draws fixed: ``torch.randint`` hands out the start canvas, then
    the renoise stream step by step; ``torch.multinomial`` becomes an argmax."""
    real_randint, real_multinomial = torch.randint, torch.multinomial
    calls = {"n": 0}

    def randint(low, high, size, *args, **kwargs):
        assert (low, high) == (0, vocab), "unexpected torch.randint call"
        n = calls["n"]
        calls["n"] += 1
        tokens = fixed.initial_canvas if n == 0 else fixed.renoise_tokens(n - 1)
        assert tuple(tokens.shape) == tuple(size)
        return torch.as_tensor(np.asarray(tokens), dtype=torch.long, device=kwargs.get("device"))

    def multinomial(probs, num_samples, *args, **kwargs):
        assert num_samples == 1
        return torch.argmax(probs, dim=-1, keepdim=True)

    torch.randint, torch.multinomial = randint, multinomial
    try:
        yield
    finally:
        torch.randint, torch.multinomial = real_randint, real_multinomial


def anchored_layouts(lm, samples, seed=3, first_free=0):
    dish = Dish(concepts=("order", "inventory", "person"), event="x")
    ids = {c: concept_token_ids(lm.tokenizer, c) for c in dish.concepts}
    return layout_samples(dish, ids, lm.canvas_length, samples, seed=seed, first_free=first_free)


def check_trajectories(lm, mlm, prompt, layouts, settings, canvas_prefix=(), seed=5):
    from petri.engine.mlx.sampler import run_mlx_sampler

    fixed = FixedNoise.from_seed(seed, len(layouts), lm.canvas_length, lm.vocab_size, settings.max_denoising_steps)
    with torch_driven_by(fixed, lm.vocab_size):
        ref = run_sampler(lm, prompt, layouts, settings, canvas_prefix=canvas_prefix)
    got = run_mlx_sampler(mlm, prompt, layouts, settings, canvas_prefix=canvas_prefix, fixed_noise=fixed)
    np.testing.assert_array_equal(got.steps, ref.steps)
    np.testing.assert_array_equal(got.argmax, ref.argmax)
    np.testing.assert_array_equal(got.accepted, ref.accepted)
    np.testing.assert_array_equal(got.anchor_mask, ref.anchor_mask)
    np.testing.assert_array_equal(got.final_ids, ref.final_ids)
    np.testing.assert_allclose(got.entropy, ref.entropy, atol=ENTROPY_ATOL, rtol=0)  # NaN padding equal too
    assert got.final_texts == ref.final_texts
    for s, spans in enumerate(layouts):
        for span in spans:
            np.testing.assert_array_equal(got.final_ids[s, span.start : span.end], span.token_ids)
            assert got.accepted[s, : got.steps[s], span.start : span.end].all()
    return ref, got


@needs_mlx
def test_same_noise_free_trajectory_tiny(pairs):
    lm, mlm = pairs["tiny"]
    prompt = [lm.tokenizer.bos_token_id, *lm.tokenizer.encode("The customer placed an order")]
    check_trajectories(lm, mlm, prompt, anchored_layouts(lm, 3), SamplerSettings(max_denoising_steps=6))


@needs_mlx
def test_same_noise_free_trajectory_staggered_stops(pairs):
    lm, mlm = pairs["tiny-short-window"]
    prompt = [lm.tokenizer.bos_token_id, *lm.tokenizer.encode("The inventory shows ninety units in stock while")]
    settings = SamplerSettings(
        max_denoising_steps=20, entropy_bound=2.0, stability_threshold=0, confidence_threshold=1.5
    )
    ref, _ = check_trajectories(lm, mlm, prompt, anchored_layouts(lm, 4), settings, canvas_prefix=(5, 6))
    assert len(set(ref.steps.tolist())) > 1, f"the samples must stop at different steps, got {ref.steps.tolist()}"


@needs_mlx
def test_same_noise_free_trajectory_variant(pairs):
    lm, mlm = pairs["variant"]
    prompt = list(range(4, 13))
    settings = SamplerSettings(max_denoising_steps=5, stability_threshold=None, confidence_threshold=None)
    check_trajectories(lm, mlm, prompt, [[], []], settings)


@needs_mlx
@embedded_weights
def test_same_noise_free_trajectory_embedded(embedded_pair):
    lm, mlm = embedded_pair
    prompt = [*lm.tokenizer.encode("The customer placed an order and the warehouse checked the inventory.")]
    settings = replace(lm.default_settings(), max_denoising_steps=6)  # the checkpoint's sampler, fewer steps
    check_trajectories(lm, mlm, prompt, anchored_layouts(lm, 2), settings)


# ------------------------------------------------------------------------- MLX sampler itself
@needs_mlx
def test_mlx_sampler_samples_with_anchors(pairs):
    from petri.engine.mlx.sampler import run_mlx_sampler

    lm, mlm = pairs["tiny-short-window"]
    layouts = anchored_layouts(lm, 4)
    prompt = [lm.tokenizer.bos_token_id, *lm.tokenizer.encode("A person in the shipping team")]
    settings = SamplerSettings(
        max_denoising_steps=12, entropy_bound=2.0, stability_threshold=0, confidence_threshold=1.5
    )
    seen = []
    first = run_mlx_sampler(mlm, prompt, layouts, settings, seed=7, on_step=lambda step: seen.append((step.index, step.argmax.shape)))
    again = run_mlx_sampler(mlm, prompt, layouts, settings, seed=7)
    np.testing.assert_array_equal(first.argmax, again.argmax)
    assert first.device.startswith("mlx:") and first.model_id == mlm.model_id
    assert [i for i, _ in seen] == list(range(first.argmax.shape[1])) and seen[0][1] == (4, lm.canvas_length)
    for s, spans in enumerate(layouts):
        ran = int(first.steps[s])
        assert (first.argmax[s, ran:] == -1).all() and np.isnan(first.entropy[s, ran:]).all()
        for span in spans:
            np.testing.assert_array_equal(first.final_ids[s, span.start : span.end], span.token_ids)


@needs_mlx
def test_load_mlx_model_reads_the_folder(pairs, tmp_path):
    from petri.engine.mlx.sampler import load_mlx_model
    from petri.engine.torch.model import ModelNotFoundError

    lm, mlm = pairs["tiny"]
    assert mlm.canvas_length == lm.canvas_length and mlm.vocab_size == lm.vocab_size
    assert mlm.default_settings() == lm.default_settings()
    assert mlm.describe()["device"].startswith("mlx:")
    with pytest.raises(ModelNotFoundError):
        load_mlx_model(tmp_path / "nothing-here")
    with pytest.raises(ModelNotFoundError):
        load_mlx_model("nobody/not-a-cached-model")


# ----------------------------------------------------------------------- backend selection
def test_select_backend_rules(monkeypatch):
    import petri.engine.select as sel

    monkeypatch.setattr(sel, "mlx_available", lambda: True)
    monkeypatch.setattr(sel, "is_apple_silicon", lambda: True)
    monkeypatch.setattr(sel, "torch_gpu_available", lambda: False)
    assert select_backend("auto") == "mlx"
    monkeypatch.setattr(sel, "torch_gpu_available", lambda: True)  # MPS usable: stay on torch
    assert select_backend("auto") == "torch"
    monkeypatch.setattr(sel, "torch_gpu_available", lambda: False)
    monkeypatch.setattr(sel, "is_apple_silicon", lambda: False)  # Linux / Intel Mac: torch
    assert select_backend() == "torch"
    assert select_backend("mlx") == "mlx" and select_backend("TORCH") == "torch"
    monkeypatch.setenv("PETRI_BACKEND", "mlx")  # --backend's default (petri.core.config), never read here
    assert select_backend("auto") == "torch" and select_backend("torch") == "torch"
    monkeypatch.setattr(sel, "mlx_available", lambda: False)
    with pytest.raises(BackendUnavailableError, match="mlx"):
        select_backend("mlx")
    with pytest.raises(BackendUnavailableError, match="jax"):
        select_backend("jax")


def test_petri_imports_without_mlx():
    """MLX is optional: importing the package and the selector never imports mlx."""
    code = (
        "import sys; import petri, petri.engine.select, petri.engine.select, petri.engine.fixed_noise; "
        "assert 'mlx' not in sys.modules, sorted(m for m in sys.modules if 'mlx' in m)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_cli_seed_runs_on_the_mlx_backend(tmp_path):
    """``python -m petri seed --backend mlx`` samples with the MLX port end to end."""
    pytest.importorskip("mlx.core")
    from petri.engine.torch.tiny import tiny_random_model

    lm = tiny_random_model(canvas_length=16)
    folder = tmp_path / "tiny-mlx"
    save_checkpoint(lm, folder)
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "petri", "seed", "--backend", "mlx", "--model", str(folder), "--event", "A person orders.",
         "--concepts", "order,person", "--samples", "2", "--steps", "3", "--out", str(out)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "on mlx:" in result.stdout
    meta = json.loads((out / "run.json").read_text())
    assert meta["device"].startswith("mlx:") and meta["sampler"] == "mlx"
