"""Encoded prompts kept for reuse (petri.engine.torch.prompt_cache): a repeated prompt skips the encoder
and samples exactly what a request that encodes it samples; what is handed out never changes what
is kept; the byte limit, the key and the public server's rule.

The reference for "the same samples" is the same request on the same model with nothing kept
(``max_bytes=0``: every request runs the encoder), never the cache itself.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from petri.core.trajectory import AnchorSpan, SamplerSettings
from petri.engine.torch.prompt_cache import PROMPT_CACHE_ENV, PromptCache, cache_bytes
from petri.engine.torch.sampler import run_sampler
from petri.engine.torch.step import encoded_prompt
from petri.engine.torch.tiny import tiny_random_model
from tiny_support import save_checkpoint

PROMPT_A = [11, 12, 13, 14, 15, 16, 17]
PROMPT_B = [21, 22, 23, 24, 25, 26, 27]
SETTINGS = SamplerSettings(max_denoising_steps=6, entropy_bound=2.0)


def layouts(batch: int) -> list[list[AnchorSpan]]:
    return [[AnchorSpan("a", 3, (40, 41)), AnchorSpan("b", 10, (50,))] for _ in range(batch)]


@pytest.fixture()
def counted_lm():
    """A fresh tiny model (its own tier and kept prompts) whose encoder counts its calls in ``lm.encoder_calls``."""
    lm = tiny_random_model(canvas_length=16)
    encoder = lm.model.model.encoder
    forward, calls = encoder.forward, []

    def counting(*args, **kwargs):
        calls.append(kwargs.get("input_ids", args[0] if args else None).shape)
        return forward(*args, **kwargs)

    encoder.forward = counting
    lm.encoder_calls = calls
    return lm


def sample(lm, prompt, batch: int, seed: int):
    return run_sampler(lm, prompt, layouts(batch), SETTINGS, seed=seed)


def same_record(a, b) -> None:
    np.testing.assert_array_equal(a.argmax, b.argmax)
    np.testing.assert_array_equal(a.entropy, b.entropy)
    np.testing.assert_array_equal(a.accepted, b.accepted)
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.final_ids, b.final_ids)


def test_a_repeated_prompt_runs_the_encoder_once_and_samples_what_encoding_it_samples(counted_lm):
    lm = counted_lm
    first = sample(lm, PROMPT_A, 3, seed=5)
    again = sample(lm, PROMPT_A, 3, seed=5)  # kept: no encoder pass
    other_seed = sample(lm, PROMPT_A, 2, seed=9)  # kept, another batch size
    assert len(lm.encoder_calls) == 1 and lm.fast_tier.prompts.hits == 2
    lm.fast_tier.prompts.set_max_bytes(0)  # the reference: every request encodes
    reference_again, reference_other = sample(lm, PROMPT_A, 3, seed=5), sample(lm, PROMPT_A, 2, seed=9)
    assert len(lm.encoder_calls) == 3
    same_record(again, reference_again)
    same_record(first, reference_again)
    same_record(other_seed, reference_other)


def test_another_prompt_is_encoded_and_the_first_stays_kept(counted_lm):
    lm = counted_lm
    sample(lm, PROMPT_A, 2, seed=1)
    b = sample(lm, PROMPT_B, 2, seed=1)
    a = sample(lm, PROMPT_A, 2, seed=1)
    assert [shape[1] for shape in lm.encoder_calls] == [len(PROMPT_A), len(PROMPT_B)]
    lm.fast_tier.prompts.set_max_bytes(0)
    same_record(a, sample(lm, PROMPT_A, 2, seed=1))
    same_record(b, sample(lm, PROMPT_B, 2, seed=1))


def test_what_is_handed_out_can_be_written_without_changing_what_is_kept(counted_lm):
    lm = counted_lm
    with torch.no_grad():
        handed = encoded_prompt(lm, PROMPT_A, 1)
        fresh = [layer.keys.clone() for layer in handed.layers]
        for layer in handed.layers:  # what the fast path's session does to its static cache
            layer.keys.add_(1.0)
            layer.values.mul_(-1.0)
        again = encoded_prompt(lm, PROMPT_A, 1)
        repeated = encoded_prompt(lm, PROMPT_A, 4)
    assert len(lm.encoder_calls) == 1
    for layer, keys in zip(again.layers, fresh):
        torch.testing.assert_close(layer.keys, keys, rtol=0, atol=0)
    for layer, keys in zip(repeated.layers, fresh):
        assert layer.keys.shape[0] == 4
        torch.testing.assert_close(layer.keys, keys.expand(4, *keys.shape[1:]), rtol=0, atol=0)


def test_cache_bytes_is_what_the_layers_hold():
    lm = tiny_random_model(canvas_length=16)
    text = lm.model.config.get_text_config()
    with torch.no_grad():
        cache = encoded_prompt(lm, PROMPT_A, 1)
    # by hand: every layer keeps (1, kv heads, P, head dim) float32 keys and values (P = 7 is
    # shorter than the sliding window, so the sliding layer keeps them all too)
    assert len(PROMPT_A) < text.sliding_window
    expected = text.num_hidden_layers * 2 * text.num_key_value_heads * len(PROMPT_A) * text.head_dim * 4
    assert cache_bytes(cache) == expected


def test_the_byte_limit_drops_the_least_recently_used_and_never_keeps_what_does_not_fit(counted_lm):
    lm = counted_lm
    with torch.no_grad():
        one = cache_bytes(encoded_prompt(lm, PROMPT_A, 1))  # PROMPT_A and PROMPT_B have the same length
        prompts = lm.fast_tier.prompts
        prompts.clear()
        prompts.set_max_bytes(one)  # room for one
        for prompt in (PROMPT_A, PROMPT_B, PROMPT_A):
            encoded_prompt(lm, prompt, 1)
        assert len(lm.encoder_calls) == 1 + 3 and prompts.held_bytes == one
        prompts.clear()
        prompts.set_max_bytes(2 * one)  # room for both: A, B, A(hit), then C drops B (least recently used)
        for prompt in (PROMPT_A, PROMPT_B, PROMPT_A, PROMPT_A[:6] + [99]):
            encoded_prompt(lm, prompt, 1)
        assert len(lm.encoder_calls) == 4 + 3
        encoded_prompt(lm, PROMPT_A, 1)
        assert len(lm.encoder_calls) == 7
        encoded_prompt(lm, PROMPT_B, 1)
        assert len(lm.encoder_calls) == 8
        prompts.clear()
        prompts.set_max_bytes(one - 1)  # a prompt larger than the limit is encoded, not kept
        encoded_prompt(lm, PROMPT_A, 1)
        encoded_prompt(lm, PROMPT_A, 1)
        assert len(lm.encoder_calls) == 10 and prompts.held_bytes == 0


def test_a_copy_of_the_loaded_model_with_another_dtype_does_not_take_its_prompts(counted_lm):
    lm = counted_lm
    other = replace(lm, dtype=torch.float64)
    assert other.fast_tier is lm.fast_tier  # same module, same tier: the key must tell them apart
    with torch.no_grad():
        encoded_prompt(lm, PROMPT_A, 1)
        encoded_prompt(other, PROMPT_A, 1)
    assert len(lm.encoder_calls) == 2


def test_the_limit_comes_from_the_configuration_and_a_bad_value_is_named(monkeypatch):
    """``PETRI_PROMPT_CACHE_MB`` is read by the configuration (never by the cache: 1,024 MiB whatever
    the environment says) and reaches a model the command line loads through its ModelSpec."""
    pytest.importorskip("pydantic")  # the options read the configuration; the GPU machine's image has no pydantic
    import argparse

    from petri.app.model_options import add_model_arguments, spec_from_args
    from petri.core.config import ConfigError, PetriConfig

    monkeypatch.setenv(PROMPT_CACHE_ENV, "3")
    assert PromptCache().max_bytes == 1024 * 2**20
    monkeypatch.setattr("petri.engine.select.load_backend_model", lambda *a, **kw: tiny_random_model(canvas_length=16))
    for given, mib in (({}, 1024), ({PROMPT_CACHE_ENV: "3"}, 3), ({PROMPT_CACHE_ENV: "0"}, 0), ({PROMPT_CACHE_ENV: " "}, 1024)):
        parser = argparse.ArgumentParser()
        add_model_arguments(parser, PetriConfig.from_env(given))
        assert spec_from_args(parser.parse_args([])).load().fast_tier.prompts.max_bytes == mib * 2**20, given
    for bad in ("lots", "-1", "1.5"):
        with pytest.raises(ConfigError, match=f"^{PROMPT_CACHE_ENV}: got '{bad}'; expected a whole number of MiB, 0 or more"):
            PetriConfig.from_env({PROMPT_CACHE_ENV: bad})


def test_a_public_server_keeps_no_prompts_unless_asked(tmp_path):
    pytest.importorskip("fastapi")  # the GPU machine's image has no web stack
    from petri.app.service import PetriService
    from petri.core.config import PetriConfig
    from petri.runs.store import RunStore
    from petri.web.access import AccessPolicy
    from petri.web.app import create_app

    def served(public: bool, environ: dict):
        lm = tiny_random_model(canvas_length=16)
        create_app(PetriService(lm, RunStore(tmp_path / f"runs-{public}-{len(environ)}")), ui=False,
                   access=AccessPolicy(public=public), config=PetriConfig.from_env(environ))
        return lm.fast_tier.prompts.max_bytes

    assert served(public=True, environ={}) == 0
    assert served(public=False, environ={}) == 1024 * 2**20
    assert served(public=True, environ={PROMPT_CACHE_ENV: "64"}) == 64 * 2**20  # the operator asked for it
    assert served(public=False, environ={PROMPT_CACHE_ENV: "64"}) == 64 * 2**20


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (the graphed session)"))])
def test_the_fast_paths_session_takes_kept_prompts_and_samples_what_encoding_them_samples(device):
    """A, B, A through one fast-path session: the session holds the first request's cache as its
    static buffer and copies each later prompt into it; the kept copies must survive that."""
    from petri.engine.cuda.fast_sampler import FastOptions, run_sampler_fast
    from petri.engine.cuda.fused.fused_logits import HAVE_TRITON

    lm = tiny_random_model(canvas_length=16)
    if device == "cuda":
        if not HAVE_TRITON:
            pytest.skip("needs Triton")
        lm.model.to("cuda", torch.bfloat16)
        lm = replace(lm, device=torch.device("cuda"), dtype=torch.bfloat16)
        options = FastOptions()
    else:
        options = FastOptions(graph=False, fused=False)

    def run_all():
        lm.fast_tier.drop_sessions()
        return [run_sampler_fast(lm, prompt, layouts(3), SETTINGS, seed=seed, options=options)
                for prompt, seed in ((PROMPT_A, 1), (PROMPT_B, 2), (PROMPT_A, 3), (PROMPT_A, 1))]

    kept = run_all()
    assert lm.fast_tier.prompts.hits == 2
    lm.fast_tier.prompts.set_max_bytes(0)
    for got, reference in zip(kept, run_all()):
        same_record(got, reference)
    same_record(kept[0], kept[3])


def test_the_mlx_backend_keeps_prompts_and_samples_what_encoding_them_samples(tmp_path):
    """MLX: A, B, A, the same seeds with nothing kept as the reference; a copy of the loaded model
    over another MLX model gets its own kept prompts."""
    from petri.engine.select import mlx_available

    if not mlx_available():
        pytest.skip('mlx is not importable (pip install "mlx[cpu]")')
    from petri.engine.mlx.sampler import load_mlx_model, run_mlx_sampler

    lm = tiny_random_model(canvas_length=16)
    save_checkpoint(lm, tmp_path)
    mlm = load_mlx_model(tmp_path, dtype="float32")
    encode, calls = mlm.model.encode, []
    mlm.model.encode = lambda ids: calls.append(len(ids[0])) or encode(ids)

    def run_all():
        return [run_mlx_sampler(mlm, prompt, layouts(3), SETTINGS, seed=seed)
                for prompt, seed in ((PROMPT_A, 1), (PROMPT_B, 2), (PROMPT_A, 3))]

    kept = run_all()
    assert calls == [len(PROMPT_A), len(PROMPT_B)] and mlm.prompts.hits == 1
    mlm.prompts.set_max_bytes(0)
    for got, reference in zip(kept, run_all()):
        same_record(got, reference)
    assert len(calls) == 2 + 3
    other = replace(mlm, model=load_mlx_model(tmp_path, dtype="float32").model)
    assert other.prompts is not mlm.prompts and other.prompts.owner is other.model
    assert replace(mlm, model_id="renamed").prompts is mlm.prompts  # same model: the same kept prompts


def test_the_model_tab_says_what_is_kept(monkeypatch, tmp_path):
    from petri.app.service import PetriService
    from petri.runs.store import RunStore
    from petri.web.ui.model import model_markdown

    lm = tiny_random_model(canvas_length=16)
    lm.fast_tier.prompts.set_max_bytes(16 * 2**20)  # PETRI_PROMPT_CACHE_MB=16
    service = PetriService(lm, RunStore(tmp_path / "runs"))
    assert "| kept prompts | encoder caches of recent prompts, up to 16 MiB" in model_markdown(service, None)
    lm.fast_tier.prompts.set_max_bytes(0)
    assert f"| kept prompts | none (`{PROMPT_CACHE_ENV}=0`" in model_markdown(service, None)
