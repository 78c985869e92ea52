"""The configuration object (petri/core/config.py): every variable read by name, blank as unset, a
bad value refused naming the variable and what it accepts, and the docs' table made from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from petri.core.config import ConfigError, PetriConfig, config_table, variable

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "configuration.md"
TABLE = re.compile(r"<!-- variables: made by petri\.core\.config\.config_table -->\n(.*?)<!-- /variables -->", re.S)

#: every variable with a value to read, and the field it must give (written out by hand)
GIVEN = {
    "PETRI_MODEL": ("google/diffusiongemma-26B-A4B-it", "model", "google/diffusiongemma-26B-A4B-it"),
    "PETRI_ALLOW_DOWNLOAD": ("yes", "allow_download", True),
    "PETRI_COMPILE": ("0", "compile", False),
    "PETRI_PRECISION": ("fp8-fast", "precision", "fp8-fast"),
    "PETRI_BACKEND": (" Torch ", "backend", "torch"),
    "PETRI_ASSETS": ("/srv/assets", "assets", Path("/srv/assets")),
    "PETRI_SHIPPED_STUDY": ("/srv/shipped", "shipped_study", Path("/srv/shipped")),
    "PETRI_PROMPT_CACHE_MB": ("0", "prompt_cache_mb", 0),
    "PETRI_API_TOKEN": ("s3cret", "api_token", SecretStr("s3cret")),
    "PETRI_PUBLIC": ("TRUE", "public", True),
    "PETRI_GPU_DURATION_S": ("120", "gpu_duration_s", 120),
    "PETRI_ZEROGPU_SIZE": ("large", "zerogpu_size", "large"),
    "GRADIO_SERVER_NAME": ("0.0.0.0", "host", "0.0.0.0"),
    "GRADIO_SERVER_PORT": ("8080", "port", 8080),
}


def test_the_defaults():
    assert PetriConfig.from_env({}) == PetriConfig()
    assert PetriConfig().model_dump() == {
        "model": None, "allow_download": False, "compile": None, "precision": "bf16", "backend": "auto",
        "assets": None, "shipped_study": None, "prompt_cache_mb": None, "api_token": None, "public": False,
        "gpu_duration_s": None, "zerogpu_size": "xlarge", "host": "127.0.0.1", "port": 7860}


def test_every_variable_is_read_and_nothing_else():
    assert set(PetriConfig.variables()) == set(GIVEN)
    config = PetriConfig.from_env({**{env: raw for env, (raw, _, _) in GIVEN.items()}, "PETRI_HEAVY": "1", "HOME": "/x"})
    assert {name: getattr(config, name) for _, name, _ in GIVEN.values()} == {name: v for _, name, v in GIVEN.values()}
    assert {env: variable(name) for env, (_, name, _) in GIVEN.items()} == {env: env for env in GIVEN}


def test_the_token_stays_out_of_the_repr():
    config = PetriConfig.from_env({"PETRI_API_TOKEN": "s3cret"})
    assert config.api_token is not None and config.api_token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(config) and "s3cret" not in str(config)


def test_a_blank_value_is_unset_and_home_is_expanded():
    assert PetriConfig.from_env({env: "  " for env in GIVEN}) == PetriConfig()
    assert PetriConfig.from_env({"PETRI_ASSETS": "~/a"}).assets == Path.home() / "a"


@pytest.mark.parametrize("env,raw,allowed", [
    ("PETRI_PROMPT_CACHE_MB", "lots", "a whole number of MiB, 0 or more"),
    ("PETRI_PROMPT_CACHE_MB", "-1", "a whole number of MiB, 0 or more"),
    ("PETRI_PROMPT_CACHE_MB", "1.5", "a whole number of MiB, 0 or more"),
    ("PETRI_COMPILE", "maybe", "1 / true / yes or 0 / false / no"),
    ("PETRI_PUBLIC", "on", "1 / true / yes or 0 / false / no"),
    ("PETRI_ALLOW_DOWNLOAD", "2", "1 / true / yes or 0 / false / no"),
    ("PETRI_BACKEND", "cuda", "auto, torch or mlx (any case)"),
    ("PETRI_GPU_DURATION_S", "0", "a whole number of seconds, 1 or more"),
    ("PETRI_ZEROGPU_SIZE", "medium", "large or xlarge"),
    ("GRADIO_SERVER_PORT", "65536", "a port, 1 to 65535"),
    ("GRADIO_SERVER_PORT", "http", "a port, 1 to 65535"),
])
def test_a_bad_value_names_its_variable_and_what_it_accepts(env, raw, allowed):
    with pytest.raises(ConfigError) as err:
        PetriConfig.from_env({"PETRI_MODEL": "fine", env: raw})
    assert str(err.value) == f"{env}: got {raw!r}; expected {allowed}" and err.value.variable == env
    assert isinstance(err.value, ValueError)


def test_the_object_is_frozen_and_refuses_an_unknown_field():
    with pytest.raises(ValueError, match="modle"):
        PetriConfig(modle="x")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="frozen"):
        PetriConfig().model = "x"  # type: ignore[misc]
    assert PetriConfig(model="x") == PetriConfig.from_env({"PETRI_MODEL": "x"})  # by field name too


def test_the_engines_names_and_defaults_agree_with_the_object():
    """The engine (which may not import pydantic: the GPU image) keeps the names its messages give
    and its own defaults; they are the object's."""
    from petri.engine.base import ALLOW_DOWNLOAD_ENV
    from petri.engine.torch.prompt_cache import DEFAULT_PROMPT_CACHE_MB, PROMPT_CACHE_ENV, PromptCache
    from petri.web import gpu_executor

    assert (ALLOW_DOWNLOAD_ENV, PROMPT_CACHE_ENV) == (variable("allow_download"), variable("prompt_cache_mb"))
    assert PromptCache().max_bytes == DEFAULT_PROMPT_CACHE_MB * 2**20 == 1024 * 2**20
    assert "unset: the engine's default, 1,024 " in PetriConfig.model_fields["prompt_cache_mb"].description
    assert gpu_executor._duration_s == [None] and PetriConfig().gpu_duration_s is None  # unset: each call's estimate


def test_the_table_has_a_row_per_variable_by_hand():
    rows = config_table().splitlines()
    assert rows[0] == "| variable | default | accepts | what it does |" and len(rows) == 2 + len(GIVEN)
    assert rows[2].startswith("| `PETRI_MODEL` | unset | a hub id, a checkpoint folder or an embedded model's name | ")
    assert "| `PETRI_ALLOW_DOWNLOAD` | `0` | 1 / true / yes or 0 / false / no |" in config_table()
    assert "| `GRADIO_SERVER_PORT` | `7860` | a port, 1 to 65535 |" in config_table()


def test_the_docs_table_is_the_objects():
    """docs/configuration.md's table is :func:`config_table`'s (rewrite it with
    ``python -c "from petri.core.config import config_table; print(config_table())"``)."""
    found = TABLE.search(PAGE.read_text())
    assert found, f"{PAGE} has no generated table"
    assert found.group(1) == config_table(), "docs/configuration.md's table is stale: paste config_table()"
