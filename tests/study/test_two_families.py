"""One study, the same events and seeds, on both families: the two embedded models, petri-tiny
(DiffusionGemma's architecture, uniform diffusion) and petri-tiny-mdm (a masked-diffusion ModernBERT
on the same corpus and tokenizer, ``<mask>`` added), each loaded by name through the one loader;
both runs go through the one study runner and store, and their pair tables sit side by side. Also
through the CLI: ``petri study --model`` on each, then ``petri paired`` on the two folders."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
from test_study_engines import STUDY as ENGINES_STUDY

from petri.cli.main import main
from petri.core.trajectory import MaskedSettings
from petri.engine.families.masked import MaskedLoadedModel
from petri.engine.torch.model import LoadedModel, load_model
from petri.runs.store import RunStore
from petri.study.execution.runner import run_study
from petri.study.plan import StudyPlan
from petri.study.results.analysis import analyze
from petri.study.schema import study_from_dict

STUDY = {**ENGINES_STUDY, "id": "two-families", "title": "uniform vs masked diffusion"}


def test_one_study_runs_on_both_families_side_by_side(tmp_path):
    models = {"uniform": load_model("petri-tiny", device="cpu"), "masked": load_model("petri-tiny-mdm", device="cpu")}
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
        results[family] = run_study(lm, StudyPlan(study, samples=3, seed=5, settings=settings), store)
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


def test_the_cli_runs_one_study_on_both_embedded_models_and_compares_them(tmp_path, capsys):
    study = tmp_path / "study.json"
    study.write_text(json.dumps(STUDY))
    for name in ("petri-tiny", "petri-tiny-mdm"):
        code = main(["study", str(study), "--model", name, "--device", "cpu", "--samples", "2", "--steps", "6",
                     "--store", str(tmp_path / "store"), "--out", str(tmp_path / name), "--no-images", "--quiet"])
        assert code == 0
        run = json.loads((tmp_path / name / "run.json").read_text())
        assert run["model_id"] == name
    events = {name: pd.read_csv(tmp_path / name / "events.csv") for name in ("petri-tiny", "petri-tiny-mdm")}
    assert list(events["petri-tiny"]["event_id"]) == list(events["petri-tiny-mdm"]["event_id"])
    capsys.readouterr()
    assert main(["paired", str(tmp_path / "petri-tiny"), str(tmp_path / "petri-tiny-mdm")]) == 0
    printed = capsys.readouterr().out
    assert "petri-tiny" in printed and "petri-tiny-mdm" in printed, printed
