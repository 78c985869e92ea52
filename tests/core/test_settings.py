"""A family's settings, described once (petri.core.settings): the stored form of both built-in
families is what it was before the families had settings of their own (so stored runs load and run
ids stay), a request is applied through one function (bounds, switches, checks, another family's
setting refused, naming the field), and the fields come in the orders the surfaces had."""

from __future__ import annotations

import json

import pytest

from petri.core.settings import SettingError, apply_settings, controls, request_fields, settings_from_dict
from petri.core.trajectory import MaskedSettings, SamplerSettings

#: Settings as runs stored them before issue 48 (``json.dumps(settings.to_dict())`` on main): the
#: uniform defaults, uniform settings with the adaptive stop off, the embedded masked model's defaults
#: (its ``petri_sampler``), and masked settings whose carried uniform fields a request had changed (the
#: API took them for a masked model then, unused).
STORED = {
    "uniform": '{"max_denoising_steps": 48, "t_min": 0.4, "t_max": 0.8, "entropy_bound": 0.1, '
               '"stability_threshold": 1, "confidence_threshold": 0.005, "pin_thought_channel": true}',
    "uniform-no-stop": '{"max_denoising_steps": 5, "t_min": 0.3, "t_max": 0.9, "entropy_bound": 0.2, '
                       '"stability_threshold": null, "confidence_threshold": null, "pin_thought_channel": false}',
    "masked": '{"max_denoising_steps": 32, "t_min": 0.4, "t_max": 0.8, "entropy_bound": 0.1, "stability_threshold": 1, '
              '"confidence_threshold": 0.005, "pin_thought_channel": false, "block_length": null, '
              '"unmask_threshold": null, "temperature": 0.5}',
    "masked-carrying": '{"max_denoising_steps": 8, "t_min": 0.3, "t_max": 0.9, "entropy_bound": 2.0, '
                       '"stability_threshold": null, "confidence_threshold": null, "pin_thought_channel": true, '
                       '"block_length": 16, "unmask_threshold": 0.25, "temperature": 0.0}',
}


@pytest.mark.parametrize("name", STORED)
def test_stored_settings_load_as_their_family_and_write_back_byte_for_byte(name):
    text = STORED[name]
    kind = MaskedSettings if name.startswith("masked") else SamplerSettings
    for family in (None, kind.FAMILY):  # runs stored before the family was recorded, and after
        settings = settings_from_dict(json.loads(text), family)
        assert type(settings) is kind
        assert json.dumps(settings.to_dict()) == text
    if kind is MaskedSettings:
        assert set(settings.to_dict()) - {c.name for c in request_fields(MaskedSettings)} == {
            "t_min", "t_max", "entropy_bound", "stability_threshold", "confidence_threshold"}  # carried, not settable


def test_new_masked_settings_store_what_they_stored_before():
    assert json.dumps(MaskedSettings(temperature=0.5).to_dict()) == STORED["masked"]
    assert MaskedSettings.from_dict(json.loads(STORED["masked"])) == MaskedSettings(temperature=0.5)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['foo'\]"):
        settings_from_dict({"max_denoising_steps": 3, "foo": 1})


def test_the_fields_come_in_the_orders_the_surfaces_had():
    assert [c.name for c in request_fields(SamplerSettings)] == [  # the API's SettingsIn, then the new ones
        "max_denoising_steps", "t_min", "t_max", "entropy_bound", "stability_threshold", "confidence_threshold",
        "adaptive_stop", "pin_thought_channel"]
    assert [c.control for c in controls(SamplerSettings)] == [  # the UI's inputs, then the thresholds
        "steps", "entropy_bound", "t_min", "t_max", "adaptive", "pin_thought", "stability_threshold",
        "confidence_threshold"]
    assert [c.flag for c in controls(MaskedSettings)] == [
        "--steps", "--thought-channel", "--block-length", "--unmask-threshold", "--temperature"]


def test_a_request_is_applied_through_one_function():
    defaults = SamplerSettings()
    off = apply_settings(defaults, {"adaptive_stop": False, "t_min": 0.2, "entropy_bound": None})
    assert off == SamplerSettings(t_min=0.2, stability_threshold=None, confidence_threshold=None)
    back_on = apply_settings(off, {"adaptive_stop": True, "confidence_threshold": 0.5})
    assert (back_on.stability_threshold, back_on.confidence_threshold) == (1, 0.5)  # the given one, else the default
    for given, field in (({"t_min": 0.9}, "t_min"), ({"t_max": 0.2}, "t_max"), ({"t_min": 0.9, "t_max": 0.5}, "t_min")):
        with pytest.raises(SettingError, match="the temperature falls from t_max to t_min") as refused:
            apply_settings(defaults, given)
        assert refused.value.field == field
    with pytest.raises(SettingError, match="not a setting of the model's family, uniform-diffusion") as refused:
        apply_settings(defaults, {"block_length": 4})
    assert refused.value.field == "block_length"
    with pytest.raises(SettingError, match="0 is below its least value, 1"):
        apply_settings(defaults, {"max_denoising_steps": 0})


def test_the_masked_settings_are_applied_and_checked_against_the_canvas():
    settings = apply_settings(MaskedSettings(), {"block_length": 16, "unmask_threshold": 0.5, "temperature": 0.3})
    assert settings == MaskedSettings(block_length=16, unmask_threshold=0.5, temperature=0.3)
    assert apply_settings(MaskedSettings(), {"block_length": 2, "max_denoising_steps": 4}) is not None  # no canvas known
    with pytest.raises(SettingError, match=r"max_denoising_steps \(4\) must be at least the number of blocks "
                                           r"\(8 of block_length 2 in a canvas of 16\)") as refused:
        apply_settings(MaskedSettings(), {"block_length": 2, "max_denoising_steps": 4}, canvas_length=16)
    assert refused.value.field == "block_length"
    with pytest.raises(SettingError, match="not a setting of the model's family, masked-diffusion") as refused:
        apply_settings(MaskedSettings(), {"t_min": 0.3})
    assert refused.value.field == "t_min"
