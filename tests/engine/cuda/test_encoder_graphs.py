"""The prompt encoder's pass captured per prompt length (petri.engine.cuda.encoder_graphs).

Everywhere: when a pass is captured (the compiled tier on CUDA, from a length's second pass, at most
``max_lengths`` lengths, least recently used out), what a failed capture does (uncaptured from then
on, the pass still right), what the tier drops, and the public server's rule; these use a stand-in
capture and a stand-in model, since CPUs have no graphs. On a GPU (skipped elsewhere): the replayed
pass gives the uncaptured compiled pass's cache bit for bit for two prompts of one length, the
first copy untouched by the second replay, the sliding layers' tail included; and seeds sampled
with the graphs equal seeds sampled without them."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from petri.core.trajectory import AnchorSpan, SamplerSettings
from petri.engine.cuda import encoder_graphs as module
from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
from petri.engine.cuda.encoder_graphs import EncoderGraphs, set_encoder_graph_lengths
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.torch.fast_tier import FastOptions
from petri.engine.torch.step import encode_prompt_once
from petri.engine.torch.tiny import tiny_random_model


class _Graph:
    """A stand-in capture: remembers its length and the prompts it replayed."""

    def __init__(self, lm, length):
        self.length, self.replayed = length, []

    def encode(self, prompt_ids):
        self.replayed.append(prompt_ids)
        return ("replayed", self.length)


def _stand_in_lm(device="cuda", compiled=True, graph=True):
    tier = SimpleNamespace(compiled_encoder_layers=["layer"] if compiled else [], options=FastOptions(graph=graph))
    return SimpleNamespace(device=torch.device(device), fast_tier=tier)


@pytest.fixture()
def uncaptured(monkeypatch):
    """The uncaptured pass replaced by a recorder: ``("uncaptured", P)``."""
    calls = []

    def encode(lm, prompt_ids):
        calls.append(prompt_ids.shape[1])
        return ("uncaptured", prompt_ids.shape[1])

    monkeypatch.setattr(module, "encode_prompt_once", encode)
    return calls


def ids(length):
    return torch.zeros((1, length), dtype=torch.long)


def test_a_length_is_captured_at_its_second_pass_and_replayed_after(uncaptured):
    graphs = EncoderGraphs(capture=_Graph)
    lm = _stand_in_lm()
    assert graphs.encode(lm, ids(5)) == ("uncaptured", 5)
    assert graphs.encode(lm, ids(7)) == ("uncaptured", 7)  # another length: its own count
    assert graphs.captures == 0 and not graphs.graphs
    assert graphs.encode(lm, ids(5)) == ("replayed", 5)  # captured now, and replayed
    assert graphs.encode(lm, ids(5)) == ("replayed", 5)
    assert uncaptured == [5, 7] and graphs.captures == 1 and graphs.replays == 2
    assert len(graphs.graphs[5].replayed) == 2 and 5 not in graphs.passes


def test_at_most_max_lengths_are_kept_the_least_recently_used_out(uncaptured):
    graphs = EncoderGraphs(max_lengths=2, capture=_Graph)
    lm = _stand_in_lm()
    for length in (3, 3, 4, 4, 3, 6, 6):  # 3 and 4 captured; 3 used again; 6 pushes 4 out
        graphs.encode(lm, ids(length))
    assert list(graphs.graphs) == [3, 6] and graphs.captures == 3
    graphs.set_max_lengths(1)
    assert list(graphs.graphs) == [6]
    graphs.set_max_lengths(0)
    assert not graphs.graphs and graphs.encode(lm, ids(6)) == ("uncaptured", 6)


@pytest.mark.parametrize("lm", [_stand_in_lm(device="cpu"), _stand_in_lm(compiled=False), _stand_in_lm(graph=False)],
                         ids=["cpu", "encoder-uncompiled", "graphs-off"])
def test_nothing_is_captured_off_the_compiled_tier_on_cuda(uncaptured, lm):
    graphs = EncoderGraphs(capture=_Graph)
    for _ in range(3):
        assert graphs.encode(lm, ids(5)) == ("uncaptured", 5)
    assert graphs.captures == 0 and not graphs.passes


def test_a_failed_capture_leaves_the_pass_uncaptured_from_then_on(uncaptured, caplog):
    def failing(lm, length):
        raise RuntimeError("operation not permitted when stream is capturing")

    graphs = EncoderGraphs(capture=failing)
    lm = _stand_in_lm()
    for _ in range(4):
        assert graphs.encode(lm, ids(5)) == ("uncaptured", 5)
    assert uncaptured == [5] * 4
    assert graphs.failed.startswith("a capture failed (RuntimeError: operation not permitted")
    assert "prompt encoder graphs off" in caplog.text
    graphs.clear()  # a new forward gets its own try
    assert graphs.failed is None


def test_the_tier_drops_its_encoder_graphs_with_its_sessions():
    lm = tiny_random_model(canvas_length=16)
    tier = lm.fast_tier
    for drop in (tier.drop_sessions, lambda: tier.set_options(FastOptions(graph=False)), lambda: tier.disable("test")):
        tier.encoder_graphs.graphs[5] = _Graph(lm, 5)
        tier.encoder_graphs.passes[7] = 1
        drop()
        assert not tier.encoder_graphs.graphs and not tier.encoder_graphs.passes


def test_a_public_server_keeps_no_encoder_graphs_unless_asked(tmp_path):
    pytest.importorskip("fastapi")  # the GPU machine's image has no web stack
    from petri.app.service import PetriService
    from petri.core.config import PetriConfig
    from petri.runs.store import RunStore
    from petri.web.access import AccessPolicy
    from petri.web.app import create_app

    def served(public: bool, config: PetriConfig = PetriConfig()) -> int:
        lm = tiny_random_model(canvas_length=16)
        create_app(PetriService(lm, RunStore(tmp_path / f"runs-{public}-{config.prompt_cache_mb}")), ui=False,
                   access=AccessPolicy(public=public), config=config)
        return lm.fast_tier.encoder_graphs.max_lengths

    assert served(public=True) == 0
    assert served(public=False) == module.DEFAULT_ENCODER_GRAPH_LENGTHS
    asked = PetriConfig.from_env({"PETRI_PROMPT_CACHE_MB": "64"})  # the operator asked to keep prompts
    assert served(public=True, config=asked) == module.DEFAULT_ENCODER_GRAPH_LENGTHS
    assert set_encoder_graph_lengths(SimpleNamespace(), 3) is False  # no torch tier


# ---- on a GPU ------------------------------------------------------------------------------------

GPU = pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_TRITON), reason="needs CUDA and Triton")
#: two prompts of one length, longer than the tiny model's sliding window (8 below)
PROMPT_A = list(range(20, 45))
PROMPT_B = list(range(60, 85))


@pytest.fixture()
def compiled_gpu_lm():
    """The compiled tier (Inductor) of a bf16 tiny model on CUDA: five sliding layers and one full."""
    lm = tiny_random_model(canvas_length=16, num_layers=6, sliding_window=8, seed=3)
    lm.model.to("cuda", torch.bfloat16)
    lm = replace(lm, device=torch.device("cuda"), dtype=torch.bfloat16)
    compile_regions(lm)
    yield lm
    uncompile_regions(lm)


def _layers(cache):
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


@GPU
@torch.no_grad()
def test_the_replayed_pass_gives_the_uncaptured_cache_bit_for_bit(compiled_gpu_lm):
    lm = compiled_gpu_lm
    prompts = [torch.tensor([p], device="cuda") for p in (PROMPT_A, PROMPT_B)]
    want = [_layers(encode_prompt_once(lm, p)) for p in prompts]
    graph = module.EncoderGraph(lm, len(PROMPT_A))
    first = graph.encode(prompts[0])
    first_layers = _layers(first)
    second = _layers(graph.encode(prompts[1]))
    assert not torch.equal(want[0][-1][0], want[1][-1][0])  # the two prompts' caches differ
    assert want[0][0][0].shape[2] == 8 - 1 and want[0][-1][0].shape[2] == len(PROMPT_A)  # sliding tail, full
    for got, reference in ((first_layers, want[0]), (second, want[1]), (_layers(first), want[0])):
        assert len(got) == len(reference)
        for index, ((keys, values), (want_keys, want_values)) in enumerate(zip(got, reference)):
            assert torch.equal(keys, want_keys) and torch.equal(values, want_values), f"layer {index}"
    assert first.get_seq_length() == len(PROMPT_A)


@GPU
def test_seeds_sampled_with_encoder_graphs_equal_seeds_sampled_without(compiled_gpu_lm):
    from petri.engine.cuda.fast_sampler import run_sampler_fast

    lm = compiled_gpu_lm
    lm.fast_tier.prompts.set_max_bytes(0)  # every request encodes its prompt
    settings = SamplerSettings(max_denoising_steps=6, entropy_bound=2.0)
    layouts = [[AnchorSpan("a", 3, (40, 41))] for _ in range(3)]

    def run_all():
        return [run_sampler_fast(lm, prompt, layouts, settings, seed=seed)
                for prompt, seed in ((PROMPT_A, 1), (PROMPT_B, 2), (PROMPT_A, 3), (PROMPT_B, 2))]

    with_graphs = run_all()
    graphs = lm.fast_tier.encoder_graphs
    assert graphs.failed is None and graphs.captures == 1 and graphs.replays == 3
    set_encoder_graph_lengths(lm, 0)
    for got, want in zip(with_graphs, run_all()):
        for field in ("argmax", "entropy", "accepted", "steps", "final_ids"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)
