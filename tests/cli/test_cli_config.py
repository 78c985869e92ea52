"""The ``petri`` command reads the environment once (petri.core.config.PetriConfig): a bad value
stops it naming the variable; the assets folder and the prompt-cache limit reach the process and,
through the ModelSpec, a worker that loads its own model."""

from __future__ import annotations

import argparse

import pytest

from petri.app.model_options import add_model_arguments, spec_from_args
from petri.cli.main import main
from petri.core import paths
from petri.core.config import PetriConfig
from petri.engine.base import ModelNotFoundError


@pytest.fixture()
def told(monkeypatch):
    monkeypatch.setattr(paths, "_TOLD", {"assets": None, "shipped_study": None})


def test_a_bad_value_stops_the_command_naming_the_variable(capsys):
    assert main(["restat", "nowhere"], environ={"PETRI_BACKEND": "cuda"}) == 2
    assert capsys.readouterr().err == "error: PETRI_BACKEND: got 'cuda'; expected auto, torch or mlx (any case)\n"


def test_the_command_tells_the_process_its_assets_folder(tmp_path, told, capsys):
    main(["restat", str(tmp_path / "nowhere")], environ={"PETRI_ASSETS": str(tmp_path / "assets")})
    assert paths.assets_dir() == tmp_path / "assets"
    assert paths.embedded_model_named("petri-tiny") == tmp_path / "assets" / "petri-tiny"


def spec(environ: dict):
    parser = argparse.ArgumentParser()
    add_model_arguments(parser, PetriConfig.from_env(environ))
    return spec_from_args(parser.parse_args(["--model", "petri-tiny", "--device", "cpu"]))


def test_a_workers_spec_carries_the_assets_folder_and_the_cache_limit(tmp_path, told):
    """A worker (a Ray actor: a fresh process, told nothing) loads from the folder the spec names:
    ``petri-tiny`` from an assets folder that has it, and from one that lacks it not at all."""
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "petri-tiny").symlink_to(paths.assets_dir() / "petri-tiny")
    lm = spec({"PETRI_ASSETS": str(tmp_path / "assets"), "PETRI_PROMPT_CACHE_MB": "2"}).load()
    assert paths.assets_dir() == tmp_path / "assets" and lm.model_id == "petri-tiny"
    assert lm.fast_tier.prompts.max_bytes == 2 * 2**20
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="empty/petri-tiny"):
        spec({"PETRI_ASSETS": str(tmp_path / "empty")}).load()
    paths.use_assets_dir(None)
    assert spec({}).load().fast_tier.prompts.max_bytes == 1024 * 2**20  # unset: the engine's default
