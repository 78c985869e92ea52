"""One study, the same events and seeds, on both families: the embedded DiffusionGemma (uniform
diffusion, assets/petri-tiny) and a masked-diffusion model loaded from a folder by the same loader
(a tiny random ModernBertForMaskedLM on the embedded model's tokenizer, ``<mask>`` added, until a
trained one ships: see experiments/train_tiny_mdm.py); both runs go through the one study runner
and store, and their pair tables sit side by side."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from petri.engine.masked_diffusion import MaskedLoadedModel
from petri.engine.torch_model import LoadedModel, load_model
from petri.paths import embedded_model_path
from petri.store import RunStore
from petri.study.analysis import analyze
from petri.study.runner import run_study
from petri.study.schema import study_from_dict
from petri.trajectory import MaskedSettings
from test_study_engines import STUDY as ENGINES_STUDY

STUDY = {**ENGINES_STUDY, "id": "two-families", "title": "uniform vs masked diffusion"}


def masked_folder_on_the_embedded_tokenizer(folder):
    """A tiny random ModernBertForMaskedLM with the embedded model's tokenizer (+ ``<mask>``), saved."""
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_path()))
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    config = ModernBertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=256, pad_token_id=0, eos_token_id=1,
                              bos_token_id=2, cls_token_id=2, sep_token_id=1, local_attention=256)
    config.canvas_length = 64
    torch.manual_seed(0)
    ModernBertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_one_study_runs_on_both_families_side_by_side(tmp_path):
    masked = load_model(masked_folder_on_the_embedded_tokenizer(tmp_path / "masked"), device="cpu")
    models = {"uniform": load_model("petri-tiny", device="cpu"), "masked": masked}
    assert isinstance(models["uniform"], LoadedModel) and isinstance(models["masked"], MaskedLoadedModel)
    assert models["masked"].tokenizer.mask_token == "<mask>"
    # the same tokenizer, the mask token added after the trained vocabulary
    assert models["masked"].vocab_size == models["uniform"].vocab_size + 1
    study = study_from_dict(STUDY)
    store = RunStore(tmp_path / "store")
    results, pairs = {}, []
    for family, lm in models.items():
        settings = MaskedSettings(max_denoising_steps=8) if family == "masked" else replace(
            lm.default_settings(), max_denoising_steps=8)
        results[family] = run_study(lm, study, store, samples=3, seed=5, settings=settings, show_progress=False)
        pairs.append(analyze(results[family], n_bootstrap=50).tables["pairs"].assign(family=family))
    store.close()
    uniform, masked = results["uniform"], results["masked"]
    assert uniform.run_id != masked.run_id
    assert [b.key for b in uniform.batches] == [b.key for b in masked.batches] == ["b1::t1", "b2::t1", "c1::t1", "c2::t1"]
    for a, b in zip(uniform.batches, masked.batches):
        assert a.seed == b.seed
        np.testing.assert_array_equal(a.trajectory.anchor_mask, b.trajectory.anchor_mask)  # same layouts
        assert a.trajectory.sampler == "eager" and b.trajectory.sampler == "masked"
        assert isinstance(b.trajectory.settings, MaskedSettings)  # read back from the store as the family's type
        # masked diffusion: each free position is unmasked exactly once, and the canvas holds no mask at the end
        free = ~b.trajectory.anchor_mask
        assert (b.trajectory.accepted.sum(axis=1)[free] == 1).all()
        assert (b.trajectory.final_ids != models["masked"].mask_token_id).all()
    side_by_side = pd.concat(pairs)
    assert set(side_by_side["family"]) == {"uniform", "masked"}
    assert side_by_side.groupby("family")["pair"].nunique().eq(3).all()
