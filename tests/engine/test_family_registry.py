"""A family is one module plus one registration (issue 48): a third family, toy diffusion
(``tests/toy_family_support.py``: its settings dataclass, step, model and loader), registered here
with one ``register_family`` call, is loaded by its checkpoint's model type, runs through the one
loop, and its settings are set and checked from the HTTP API, the CLI and the UI's Dish and Compare
tabs, with no file of ``petri/`` naming it. The registry refuses what no surface could be made of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
from fastapi.testclient import TestClient

from petri.app.service import PetriService
from petri.cli.main import build_parser, main
from petri.cli.options import settings_from_args
from petri.core.paths import embedded_model_named
from petri.core.settings import FamilySettings, setting
from petri.core.trajectory import MASKED_FAMILY, UNIFORM_FAMILY, settings_from_dict
from petri.engine.families.registry import (
    Family,
    families,
    family_for_model_type,
    get_family,
    register_family,
    unregister_family,
)
from petri.engine.select import load_backend_model
from petri.engine.torch.tiny import tiny_masked_model
from petri.runs.store import RunStore
from petri.web.app import create_app
from toy_family_support import TOY, TOY_FAMILY, ToyScheduler, ToySettings, toy_of, write_toy_checkpoint

CONCEPTS = ["order", "person"]


@pytest.fixture()
def toy():
    """The one registration, undone after the test."""
    family = register_family(TOY)
    yield family
    unregister_family(TOY_FAMILY)


@pytest.fixture(scope="module")
def toy_lm():
    return toy_of(tiny_masked_model(canvas_length=16))


@pytest.fixture()
def toy_service(toy, toy_lm, tmp_path):
    """A service over the toy family's model (not the shared ``service``: another family)."""
    service = PetriService(toy_lm, RunStore(tmp_path / "store"))
    yield service
    service.store.close()


def test_the_registry_knows_it_by_its_model_type_and_reads_its_stored_settings(toy):
    assert [f.id for f in families()] == [UNIFORM_FAMILY, MASKED_FAMILY, TOY_FAMILY]
    assert get_family(TOY_FAMILY) is toy and family_for_model_type("petri_toy") is toy
    assert family_for_model_type("bert").id == MASKED_FAMILY and family_for_model_type(None).id == UNIFORM_FAMILY
    assert toy.scheduler() is ToyScheduler
    stored = ToySettings(stride=3).to_dict()
    assert settings_from_dict(stored, TOY_FAMILY) == ToySettings(stride=3)
    assert settings_from_dict({"stride": 3}) == ToySettings(stride=3)  # by its keys, as an older run would be


def test_it_runs_through_the_loop_with_its_step(toy, toy_lm):
    from petri.core.dish import Dish
    from petri.engine.seeding import seed_dish

    traj = seed_dish(toy_lm, Dish(tuple(CONCEPTS), "x", "{event}", shuffle=False), 2,
                     ToySettings(max_denoising_steps=4, stride=8), seed=0)
    assert traj.family == TOY_FAMILY and traj.sampler == "toy" and traj.steps.tolist() == [2, 2]
    free = ~traj.anchor_mask[0]
    assert (traj.accepted[0, 0] == free & (free.cumsum() <= 8)).all()  # left to right, a stride a step


def test_the_api_takes_and_checks_its_settings(toy_service):
    client = TestClient(create_app(toy_service, ui=False))
    body = {"concepts": CONCEPTS, "event": "The order shipped.", "samples": 2, "seed": 1}
    answer = client.post("/api/seed", json={**body, "settings": {"max_denoising_steps": 2, "stride": 8}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["settings"] == {"max_denoising_steps": 2, "pin_thought_channel": False, "stride": 8}
    stored = toy_service.store.load_events(answer.json()["run_id"])[0][2]
    assert stored.settings == ToySettings(max_denoising_steps=2, stride=8) and stored.steps.tolist() == [2, 2]

    def refused(settings: dict) -> dict:
        answer = client.post("/api/seed", json={**body, "settings": settings})
        assert answer.status_code == 422, answer.text
        return answer.json()["detail"][0]

    assert refused({"stride": 0})["loc"] == ["body", "settings", "stride"]  # its bounds
    assert refused({"stride": "8"})["loc"] == ["body", "settings", "stride"]  # no coercion
    crossed = refused({"stride": 2, "max_denoising_steps": 4})  # its check, with the served canvas
    assert crossed["loc"] == ["body", "settings", "stride"] and "leaves part of the 16-position canvas" in crossed["msg"]
    other = refused({"t_min": 0.3})  # another family's setting
    assert other["loc"] == ["body", "settings", "t_min"] and "toy-diffusion" in other["msg"]
    schema = client.get("/openapi.json").json()["components"]["schemas"]["SettingsIn"]
    assert schema["properties"]["stride"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 64}


def test_the_cli_has_its_flags(toy, tmp_path):
    parse = build_parser().parse_args
    args = parse(["seed", "--event", "x", "--concepts", "order,person", "--stride", "8", "--steps", "2"])
    assert settings_from_args(ToySettings(), args, 16) == ToySettings(max_denoising_steps=2, stride=8)
    for flags, message in ((["--stride", "0"], "--stride: 0 is below its least value, 1"),
                           (["--stride", "2", "--steps", "4"], r"--stride: stride \(2\) times max_denoising_steps \(4\)"),
                           (["--t-min", "0.3"], "--t-min: not a setting of the model's family, toy-diffusion")):
        with pytest.raises(ValueError, match=message):
            settings_from_args(ToySettings(), parse(["seed", "--event", "x", "--concepts", "a,b", *flags]), 16)
    # `petri seed` on a toy checkpoint: loaded by its model type, sampled with its flags
    folder = write_toy_checkpoint(tmp_path / "toy", embedded_model_named("petri-tiny-mdm"))
    assert load_backend_model(str(folder), device="cpu").family == TOY_FAMILY
    out = tmp_path / "out"
    assert main(["seed", "--model", str(folder), "--event", "The order shipped.", "--concepts", "order,person",
                 "--samples", "2", "--stride", "32", "--steps", "2", "--out", str(out)]) == 0
    import json

    run = json.loads((out / "run.json").read_text())
    assert run["settings"] == {"max_denoising_steps": 2, "pin_thought_channel": False, "stride": 32}, run["settings"]


def test_the_ui_builds_its_controls_and_runs_them(toy_service):
    from petri.web.ui.build import build_ui
    from petri.web.ui.compare import CompareController
    from petri.web.ui.dish_tab.dish import DishController

    config = build_ui(toy_service).get_config_file()
    ids = {c["props"].get("elem_id") for c in config["components"]}
    assert {"petri-steps", "petri-pin-thought", "petri-stride", "petri-cmp-stride"} <= ids  # Dish and Compare
    assert "petri-t-min" not in ids and "petri-block-length" not in ids  # the served family's controls only
    dish = DishController(toy_service)
    assert dish.setting_names == ("steps", "pin_thought", "stride")
    inputs = ["order, person", "The order shipped.", "{event}", 2, 1, dish.spread("order, person"), False]
    assert dish.build_request(*inputs, 2, False, 8).settings.given() == {"max_denoising_steps": 2,
                                                                          "pin_thought_channel": False, "stride": 8}
    marks = dish.validate(*inputs, 2, False, 0)
    assert [i for i, m in enumerate(marks) if not m["is_valid"]] == [9] and "stride" in marks[9]["message"]
    *_, done = dish.run(*inputs, 2, False, 8)
    assert done["status"].startswith("Done:")
    assert toy_service.store.load_events(done["run_id"])[0][2].settings == ToySettings(max_denoising_steps=2, stride=8)
    reopened = dish.controls_of(toy_service.store.get_run(done["run_id"])["request"],
                                toy_service.store.load_events(done["run_id"])[0][2])
    assert (reopened["steps"], reopened["pin_thought"], reopened["stride"]) == (2, False, 8)
    compare = CompareController(toy_service, dish)
    _, request = compare.request_of("order, person", "a", "The order shipped.", "b", "None was in stock.", "{event}",
                                    2, 1, 2, None, True, False, 8)
    assert request.settings.given() == {"max_denoising_steps": 2, "pin_thought_channel": False, "stride": 8}


def test_the_registry_refuses_what_no_surface_could_show(toy):
    @dataclass(frozen=True)
    class Stepless(FamilySettings):
        FAMILY: ClassVar[str] = "stepless"
        pin_thought_channel: bool = setting(False, "pin")

    @dataclass(frozen=True)
    class Clashing(FamilySettings):
        FAMILY: ClassVar[str] = "clashing"
        max_denoising_steps: int = setting(8, "steps", ge=1, le=10)  # other bounds than every other family's
        pin_thought_channel: bool = setting(False, "pin")

    with pytest.raises(ValueError, match="already registered"):
        register_family(TOY)
    with pytest.raises(ValueError, match="have max_denoising_steps"):
        register_family(Family(Stepless, ("stepless",), TOY.load, TOY.step))
    with pytest.raises(ValueError, match="'max_denoising_steps' differs"):
        register_family(Family(Clashing, ("clashing",), TOY.load, TOY.step))
    @dataclass(frozen=True)
    class SameType(ToySettings):
        FAMILY: ClassVar[str] = "same-type"

    with pytest.raises(ValueError, match="model_type 'petri_toy' is already 'toy-diffusion'"):
        register_family(Family(SameType, ("petri_toy",), TOY.load, TOY.step))
    assert [f.id for f in families()] == [UNIFORM_FAMILY, MASKED_FAMILY, TOY_FAMILY]
