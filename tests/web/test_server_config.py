"""The server reads the environment once (petri.core.config.PetriConfig) and passes it down: the
address, the access policy, the prompt-cache limit, the ZeroGPU call's duration, the assets folder
and the shipped study; a bad value stops it before anything loads, naming the variable. Model,
app and server are stand-ins where loading would be slow."""

from __future__ import annotations

import types

import pytest

from petri.core import paths
from petri.core.config import PetriConfig
from petri.web import gpu_executor
from petri.web import server as app_module


@pytest.fixture()
def told(monkeypatch):
    """The folders an entry point tells ``petri.core.paths`` of, restored after the test."""
    monkeypatch.setattr(paths, "_TOLD", {"assets": None, "shipped_study": None})


def stand_ins(monkeypatch):
    """Record what ``main`` builds instead of building it: (args, create_app's keywords, served)."""
    seen: dict = {}
    service = types.SimpleNamespace(model_id="stand-in", model_info=lambda: {"device": "cpu"})
    monkeypatch.setattr(app_module, "build_service", lambda args: seen.setdefault("args", args) and (service, None))
    monkeypatch.setattr(app_module, "create_app", lambda service, **kw: seen.setdefault("app", kw) and "the app")
    monkeypatch.setattr(app_module, "serve", lambda app, service, host, port: seen.setdefault("served", (host, port)))
    return seen


def test_the_server_takes_every_setting_from_the_environment_it_is_given(monkeypatch, tmp_path, told):
    seen = stand_ins(monkeypatch)
    environ = {"PETRI_PUBLIC": "yes", "PETRI_API_TOKEN": "t0k", "PETRI_PROMPT_CACHE_MB": "5",
               "PETRI_GPU_DURATION_S": "7", "PETRI_ASSETS": str(tmp_path / "a"),
               "PETRI_SHIPPED_STUDY": str(tmp_path / "s"), "PETRI_MODEL": "petri-tiny", "PETRI_BACKEND": "torch",
               "GRADIO_SERVER_PORT": "7999", "PETRI_ALLOW_DOWNLOAD": "1"}
    assert app_module.main(["--store", str(tmp_path / "runs")], environ=environ) == 0
    access, config = seen["app"]["access"], seen["app"]["config"]
    assert (access.public, access.api_token) == (True, "t0k")  # public on loopback, as PETRI_PUBLIC says
    assert (config.prompt_cache_mb, config.gpu_duration_s) == (5, 7)
    assert seen["served"] == ("127.0.0.1", 7999)
    args = seen["args"]
    assert (args.model, args.backend, args.allow_download, args.prompt_cache_mb, args.assets) == (
        "petri-tiny", "torch", True, 5, str(tmp_path / "a"))
    assert paths.assets_dir() == tmp_path / "a" and paths.shipped_study_dir() == tmp_path / "s"
    assert paths.studies_dir() == tmp_path / "a" / "studies"


def test_the_process_environment_is_read_when_none_is_given(monkeypatch, tmp_path, told):
    seen = stand_ins(monkeypatch)
    monkeypatch.setenv("PETRI_API_TOKEN", "from-env")
    assert app_module.main(["--store", str(tmp_path / "runs")]) == 0
    assert seen["app"]["access"].api_token == "from-env" and seen["app"]["access"].public is False


@pytest.mark.parametrize("env,raw", [("GRADIO_SERVER_PORT", "http"), ("PETRI_PRECISION", "fp4"),
                                     ("PETRI_PUBLIC", "maybe")])
def test_a_bad_value_stops_the_server_naming_the_variable(monkeypatch, capsys, env, raw):
    monkeypatch.setattr(app_module, "build_service", lambda args: pytest.fail("loaded a model"))
    assert app_module.main([], environ={env: raw}) == 2
    assert capsys.readouterr().err.startswith(f"error: {env}: ")


def test_petri_serve_hands_the_commands_configuration_to_the_server(monkeypatch):
    from petri.cli import main as cli

    got = []
    monkeypatch.setattr(app_module, "main", lambda argv, prog, config: got.append((argv, prog, config)) or 0)
    assert cli.main(["serve", "--port", "1"], environ={"PETRI_GPU_DURATION_S": "9"}) == 0
    assert got == [(["--port", "1"], "petri serve", PetriConfig(gpu_duration_s=9))]


def test_the_app_passes_the_gpu_duration_and_the_cache_limit_on(monkeypatch, tmp_path):
    from petri.app.service import PetriService
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    monkeypatch.setattr(gpu_executor, "_served", [])
    monkeypatch.setattr(gpu_executor, "_duration_s", [None])
    lm = tiny_random_model(canvas_length=16)
    create_app(PetriService(lm, RunStore(tmp_path / "runs")), ui=False, config=PetriConfig(gpu_duration_s=7,
                                                                                            prompt_cache_mb=3))
    assert gpu_executor.seed_duration(None) == 7  # type: ignore[arg-type]  # the plan is not read
    assert lm.fast_tier.prompts.max_bytes == 3 * 2**20
