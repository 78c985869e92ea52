"""The ZeroGPU variant of the Space's front matter (assets/space/zerogpu.yaml, written into README.md
by experiments/space_variant.py): it parses, names only keys of the Spaces configuration reference
with values of the kinds the reference gives, preloads the model petri serves as the real one, and
the written README keeps the base front matter and the body."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "experiments"))

import space_variant  # noqa: E402

from petri.engine.base import REAL_MODEL_ID  # noqa: E402

#: The keys of hub-docs' spaces-config-reference.md (read December 2026).
SPACE_KEYS = {"title", "emoji", "colorFrom", "colorTo", "sdk", "python_version", "sdk_version", "suggested_hardware",
              "suggested_storage", "app_file", "app_build_command", "app_port", "base_path", "fullWidth", "header",
              "short_description", "models", "datasets", "tags", "thumbnail", "pinned", "hf_oauth",
              "hf_oauth_scopes", "hf_oauth_expiration_minutes", "hf_oauth_authorized_org", "disable_embedding",
              "startup_duration_timeout", "custom_headers", "preload_from_hub", "license"}
#: ``preload_from_hub`` entries: ``repo_id [comma-separated files or patterns] [revision]``.
PRELOAD = re.compile(r"^[\w.-]+/[\w.-]+( \S+)?( [0-9a-f]{40}|\s[\w.-]+)?$")


def test_the_zerogpu_variant_names_valid_keys_and_values():
    from huggingface_hub import SpaceHardware

    keys = space_variant.variant_keys("zerogpu")
    assert set(keys) <= SPACE_KEYS, set(keys) - SPACE_KEYS
    assert keys["suggested_hardware"] == "zero-a10g" and keys["suggested_hardware"] in {h.value for h in SpaceHardware}
    assert all(PRELOAD.match(entry) for entry in keys["preload_from_hub"])
    assert [entry.split()[0] for entry in keys["preload_from_hub"]] == [REAL_MODEL_ID]
    timeout = re.fullmatch(r"(\d+)([mh])", keys["startup_duration_timeout"])
    assert timeout is not None and int(timeout[1]) * {"m": 1, "h": 60}[timeout[2]] > 30  # more than the default


def test_the_written_readme_is_the_base_with_the_variant_merged(tmp_path):
    base = (REPO / "README.md").read_text(encoding="utf-8")
    out = tmp_path / "README.md"
    assert space_variant.main(["zerogpu", "--write", str(out)]) == 0
    front, body = space_variant.split_front_matter(out.read_text(encoding="utf-8"))
    base_front, base_body = space_variant.split_front_matter(base)
    assert body == base_body
    assert set(front) <= SPACE_KEYS and front == {**base_front, **space_variant.variant_keys("zerogpu")}
    assert front["app_file"] == "app.py" and front["sdk"] == "gradio"
    assert yaml.safe_load(out.read_text(encoding="utf-8").split("---")[1]) == front


def test_an_unknown_variant_is_named():
    with pytest.raises(ValueError, match="variant: no nope.yaml"):
        space_variant.variant_keys("nope")
