"""A study's run id rests on :func:`petri.engine.checkpoints.weights_fingerprint`: the same weights must
give the same fingerprint wherever the checkpoint lies (it hashed the config's ``_name_or_path``, so a
clean clone in another folder got other run ids, and a documented ``petri replay RUN_ID`` failed
there), and other weights another one."""

from __future__ import annotations

import shutil

import torch

from petri.engine.checkpoints import weights_fingerprint
from petri.engine.torch.model import EMBEDDED_MODEL_PATH, load_model


def test_the_same_weights_in_two_folders_have_one_fingerprint_and_other_weights_another(tmp_path):
    source = EMBEDDED_MODEL_PATH.parent / "petri-tiny"
    copy = tmp_path / "elsewhere" / "petri-tiny"
    shutil.copytree(source, copy)
    here, there = load_model(source, device="cpu"), load_model(copy, device="cpu")
    assert here.model.config._name_or_path != there.model.config._name_or_path
    assert weights_fingerprint(here.model, torch.float32) == weights_fingerprint(there.model, torch.float32)
    with torch.no_grad():
        next(there.model.parameters()).view(-1)[0] += 1.0
    assert weights_fingerprint(here.model, torch.float32) != weights_fingerprint(there.model, torch.float32)
