"""Masked diffusion, the second family: its step against a plain loop of LLaDA's published
low-confidence remasking (arXiv 2502.09992, the repository's ``generate``), written here from the
algorithm; the record; the threshold rule on scripted logits; loading and the CLI on a tiny random
BertForMaskedLM saved to a folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from petri.core.dish import Dish, concept_token_ids, layout_samples, pinned_arrays
from petri.engine.base import SampleRequest
from petri.engine.families.masked import MaskedLoadedModel, MaskedSettings
from petri.engine.torch.tiny import tiny_masked_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["bert", "modernbert"])
def masked_lm(request):
    return tiny_masked_model(canvas_length=16, seed=2, architecture=request.param)


def llada_reference(model, prompt, pinned, pinned_ids, mask_id, steps, block_length):
    """LLaDA's ``generate`` (temperature 0, low-confidence remasking), one plain loop: the canvas
    starts as the mask token except the pinned positions (given tokens, so never masked); per
    block, the masked count is spread over the block's steps (remainder to the first steps); each
    step the model reads prompt + canvas, predicts the argmax everywhere, and the most confident
    masked positions up to the block's end are unmasked. Returns the final canvas (S, L), and per
    step the argmax over the canvas (T, S, L), the positions unmasked (T, S, L) and the canvas after
    the step (T, S, L)."""
    batch, length = pinned.shape
    p = prompt.shape[1]
    x = torch.full((batch, p + length), mask_id, dtype=torch.long)
    x[:, :p] = prompt
    x[:, p:] = torch.where(pinned, pinned_ids, torch.full_like(pinned_ids, mask_id))
    blocks = length // block_length
    per_block = steps // blocks
    argmaxes, unmasked, canvases = [], [], []
    for b in range(blocks):
        block_masked = x[:, p + b * block_length: p + (b + 1) * block_length] == mask_id
        count = block_masked.sum(dim=1)
        budget = torch.zeros((batch, per_block), dtype=torch.long) + (count // per_block)[:, None]
        for s in range(batch):
            budget[s, : int(count[s] % per_block)] += 1
        for i in range(per_block):
            mask_index = x == mask_id
            logits = model(input_ids=x).logits
            x0 = torch.argmax(logits, dim=-1)
            probability = torch.gather(torch.softmax(logits, dim=-1), -1, x0[..., None])[..., 0]
            probability[:, p + (b + 1) * block_length:] = -np.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, probability, torch.tensor(-np.inf))
            transfer = torch.zeros_like(x0, dtype=torch.bool)
            for s in range(batch):
                chosen = torch.topk(confidence[s], k=int(budget[s, i])).indices
                transfer[s, chosen] = True
            x[transfer] = x0[transfer]
            argmaxes.append(torch.argmax(logits, dim=-1)[:, p:])
            unmasked.append(transfer[:, p:])
            canvases.append(x[:, p:].clone())
    return x[:, p:], torch.stack(argmaxes), torch.stack(unmasked), torch.stack(canvases)


def anchored(lm, samples, first_free=2):
    dish = Dish(concepts=("order", "inventory"), event="x")
    ids = {c: concept_token_ids(lm.tokenizer, c) for c in dish.concepts}
    return layout_samples(dish, ids, lm.canvas_length, samples, seed=3, first_free=first_free)


@pytest.mark.parametrize("samples, steps, block_length, prefix", [(1, 8, 16, ()), (3, 12, 8, (5, 6)), (2, 16, 4, (7,))])
def test_the_step_equals_lladas_low_confidence_remasking(masked_lm, samples, steps, block_length, prefix):
    lm = masked_lm
    layouts = anchored(lm, samples, first_free=len(prefix)) if prefix else [[] for _ in range(samples)]
    prompt = [lm.tokenizer.bos_token_id, *lm.tokenizer.encode("The customer placed an order")]
    settings = MaskedSettings(max_denoising_steps=steps, block_length=block_length)
    traj = lm.sample(SampleRequest(prompt, layouts, settings, seed=0, canvas_prefix=prefix))
    pinned, pinned_ids = (torch.from_numpy(a) for a in pinned_arrays(layouts, prefix, lm.canvas_length))
    with torch.no_grad():
        final, argmaxes, unmasked, canvases = llada_reference(
            lm.model, torch.tensor([prompt]), pinned, pinned_ids, lm.mask_token_id, steps, block_length
        )
    np.testing.assert_array_equal(traj.final_ids, final.numpy())
    np.testing.assert_array_equal(traj.argmax, argmaxes.permute(1, 0, 2).numpy())  # raw argmax everywhere
    np.testing.assert_array_equal(traj.accepted, unmasked.permute(1, 0, 2).numpy())  # accepted = unmasked now
    np.testing.assert_array_equal(traj.canvas, canvases.permute(1, 0, 2).numpy())  # the canvas after each step
    np.testing.assert_array_equal(traj.canvas[:, -1], traj.final_ids)  # the last frame is the final text
    assert traj.family == "masked-diffusion" and traj.mask_id == lm.mask_token_id
    assert (traj.steps == steps).all()
    assert (traj.final_ids != lm.mask_token_id).all()  # every position unmasked by the last step
    assert (traj.final_ids[pinned.numpy()] == pinned_ids.numpy()[pinned.numpy()]).all()
    assert not traj.accepted[np.broadcast_to(pinned.numpy()[:, None], traj.accepted.shape)].any()  # never masked
    assert np.isfinite(traj.entropy).all() and (traj.entropy > 0).all()


class Scripted(torch.nn.Module):
    """A stand-in masked LM whose logits over the canvas are ``script[call]`` (S, L, V)."""

    def __init__(self, script, prompt_length):
        super().__init__()
        self.script, self.calls, self.prompt_length = script, 0, prompt_length
        self.config = SimpleNamespace(vocab_size=script[0].shape[-1], max_position_embeddings=64)

    def forward(self, input_ids):
        logits = torch.zeros((*input_ids.shape, self.config.vocab_size))
        logits[:, self.prompt_length:] = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return SimpleNamespace(logits=logits)


def confident(tokens, probability, vocab=4):
    """Logits (1, L, V) whose softmax puts ``probability[i]`` on ``tokens[i]`` and the rest evenly."""
    rows = []
    for token, p in zip(tokens, probability):
        rest = (1 - p) / (vocab - 1)
        row = torch.full((vocab,), float(np.log(rest)))
        row[token] = float(np.log(p))
        rows.append(row)
    return torch.stack(rows)[None]


def test_the_threshold_unmasks_every_confident_position_and_at_least_one():
    # mask id 3; canvas of 4. Step 0: confidences .9 .2 .95 .3 → threshold .5 unmasks positions 0 and 2.
    # Step 1: positions 0 and 2 are unmasked (their .6 and .7 do not count, their tokens stay); of the
    # masked ones (.3, .4) none reaches .5, so the most confident (position 3) alone. Step 2: position 1.
    script = [confident([1, 2, 0, 1], [0.9, 0.2, 0.95, 0.3]), confident([2, 1, 2, 2], [0.6, 0.3, 0.7, 0.4]),
              confident([0, 0, 0, 0], [0.5, 0.6, 0.5, 0.5])]
    lm = MaskedLoadedModel(model=Scripted(script, 1), tokenizer=None, model_id="scripted", device=torch.device("cpu"),
                           dtype=torch.float32, mask_token_id=3, canvas_length=4)
    traj = lm.sample(SampleRequest([0], [[]], MaskedSettings(max_denoising_steps=10, unmask_threshold=0.5)))
    assert traj.steps.tolist() == [3]  # finished when nothing is masked
    assert traj.accepted[0].tolist() == [[True, False, True, False], [False, False, False, True],
                                         [False, True, False, False]]
    assert traj.final_ids[0].tolist() == [1, 0, 0, 2]
    assert traj.argmax[0, 1].tolist() == [2, 1, 2, 2]  # the raw argmax also where already unmasked


def test_blocks_go_left_to_right_with_the_budget():
    # two blocks of 2 and 4 steps: block 0 (positions 0-1) is unmasked in steps 0-1, block 1 in steps 2-3,
    # one position a step (the most confident of the block, never one of the next block).
    script = [confident([1, 1, 1, 1], [0.3, 0.4, 0.9, 0.9])] * 4
    lm = MaskedLoadedModel(model=Scripted(script, 1), tokenizer=None, model_id="scripted", device=torch.device("cpu"),
                           dtype=torch.float32, mask_token_id=3, canvas_length=4)
    traj = lm.sample(SampleRequest([0], [[]], MaskedSettings(max_denoising_steps=4, block_length=2)))
    assert np.argwhere(traj.accepted[0]).tolist() == [[0, 1], [1, 0], [2, 2], [3, 3]]


def test_too_few_steps_for_the_blocks_is_refused_by_name(masked_lm):
    with pytest.raises(ValueError, match="max_denoising_steps"):
        masked_lm.sample(SampleRequest([2], [[]], MaskedSettings(max_denoising_steps=3, block_length=4)))


def save_tiny_bert(folder: Path, with_mask: bool = True) -> Path:
    lm = tiny_masked_model(canvas_length=16, seed=5)
    lm.model.save_pretrained(folder)
    tokenizer = lm.tokenizer
    if not with_mask:
        from petri.engine.torch.tiny import build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
    tokenizer.save_pretrained(folder)
    return folder


def test_load_model_picks_the_masked_family_from_the_folder(tmp_path):
    from petri.engine.torch.model import load_model

    lm = load_model(save_tiny_bert(tmp_path / "bert"), device="cpu")
    assert isinstance(lm, MaskedLoadedModel) and lm.family == "masked-diffusion"
    assert lm.canvas_length == 16 and lm.mask_token_id == lm.tokenizer.mask_token_id
    assert lm.max_prompt_length == 128 - 16


def test_a_masked_model_without_a_mask_token_is_refused_by_name(tmp_path):
    from petri.engine.torch.model import load_model

    with pytest.raises(ValueError, match="mask_token_id"):
        load_model(save_tiny_bert(tmp_path / "bert", with_mask=False), device="cpu")


def test_cli_seed_on_a_tiny_bert_folder_writes_the_usual_csvs(tmp_path):
    folder = save_tiny_bert(tmp_path / "tiny-bert")
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "petri", "seed", "--event", "Only 90 units are in stock, but 120 were ordered.",
         "--concepts", "order,inventory,person", "--samples", "3", "--model", str(folder), "--out", str(out),
         "--seed", "4", "--steps", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    positions, samples = pd.read_csv(out / "positions.csv"), pd.read_csv(out / "samples.csv")
    segments = pd.read_csv(out / "segments.csv")
    assert len(positions) == 3 * 16 and len(samples) == 3 and len(segments) == 3 * 2
    meta = json.loads((out / "run.json").read_text())
    assert meta["model_id"] == "tiny-bert" and meta["sampler"] == "masked"
    assert meta["settings"]["max_denoising_steps"] == 8 and meta["settings"]["block_length"] is None
