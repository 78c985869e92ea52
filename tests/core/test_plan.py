"""Issue 48: a SeedPlan is made once at the edge and passed down. A UI Dish run, a Compare run and
``POST /api/seed`` lay each event out once (they laid it out three times: in the request check, in
the live view and in the sampler), and every step's LiveStep carries the plan's pinned mask and run
id, so the live view needs no mask of its own."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import petri.engine.seeding as seeding
from petri.core.dish import Dish
from petri.core.plan import SeedEvent, SeedPlan
from petri.core.trajectory import SamplerSettings
from petri.core.watch import Watch
from petri.study.plan import StudyPlan


@pytest.fixture()
def layouts_made(count_calls):
    """How many times an event was laid out (layout_samples as the seeding module calls it)."""
    return count_calls(seeding, "layout_samples")


def hand_pinned(planned, length: int) -> np.ndarray:
    """What each sample pins, from the plan's layouts by hand: the canvas prefix, then every anchor."""
    mask = np.zeros((len(planned.layouts), length), dtype=bool)
    for s, spans in enumerate(planned.layouts):
        mask[s, : len(planned.prompt.canvas_prefix_ids)] = True
        for span in spans:
            mask[s, span.start: span.start + len(span.token_ids)] = True
    return mask


def test_every_step_carries_the_plans_pinned_mask_and_run_id(service):
    plan = service.plan([SeedEvent(Dish(("order", "person"), "The order was packed.")),
                         SeedEvent(Dish(("order", "person"), "None was in stock."))], 3,
                        SamplerSettings(max_denoising_steps=4), seed=5)
    steps = []
    result = service.seed(plan, watch=Watch(on_step=steps.append))
    assert result.run_id == plan.run_id and service.store.get_run(plan.run_id)["status"] == "done"
    assert len(steps) == sum(int(t.steps.max()) for t in result.trajectories) > 0
    first = int(result.trajectories[0].steps.max())
    for n, step in enumerate(steps):
        planned = plan.events[0 if n < first else 1]
        np.testing.assert_array_equal(step.pinned, hand_pinned(planned, service.lm.canvas_length))
        assert step.pinned.any() and step.run_id == plan.run_id
    for planned, traj in zip(plan.events, result.trajectories):
        np.testing.assert_array_equal(traj.anchor_mask, planned.pinned)  # sampled as planned


def test_a_ui_dish_run_lays_its_event_out_once(service, layouts_made):
    from petri.web.ui.dish_tab.dish import DishController

    ctl = DishController(service)
    placement = ctl.spread("order, inventory", True)
    layouts_made.clear()  # the slot table's preview is not the run
    inputs = ["order, inventory", "The order was packed.", "{event}", 2, 0, placement, True]
    inputs += [3 if name == "max_denoising_steps" else None for name in ctl.setting_names]
    updates = list(ctl.run(*inputs))
    assert updates[-1]["status"].startswith("Done"), updates[-1].get("status")
    assert len(layouts_made) == 1


def test_a_ui_compare_run_lays_each_event_out_once(service, layouts_made):
    from petri.web.ui.compare import CompareController
    from petri.web.ui.dish_tab.dish import DishController

    ctl = CompareController(service, DishController(service))
    layouts_made.clear()
    updates = list(ctl.run("order, inventory", "calm", "The order was packed.", "tense", "None of it was in stock.",
                           "{event}", 2, 0, 3, None, True, None, None, None, False, None))
    assert updates[-1]["status"].startswith("Done"), updates[-1].get("status")
    assert len(layouts_made) == 2


def test_post_api_seed_lays_each_event_out_once(service, layouts_made):
    from petri.web.app import create_app

    with TestClient(create_app(service, ui=False)) as client:
        answer = client.post("/api/seed", json={"concepts": ["order", "person"], "samples": 2, "seed": 1,
                                                "settings": {"max_denoising_steps": 3},
                                                "events": [{"event": "The order was packed."}, {"event": "None left."}]})
    assert answer.status_code == 200, answer.text
    assert len(layouts_made) == 2


def test_a_plan_refuses_layouts_that_do_not_match_its_samples(service):
    plan = service.plan([SeedEvent(Dish(("order", "person"), "x"))], 2, SamplerSettings(max_denoising_steps=2))
    with pytest.raises(ValueError, match=r"events\[0\]: 2 layouts for 3 samples"):
        SeedPlan(plan.events, 3, plan.settings)
    with pytest.raises(ValueError, match="events"):
        SeedPlan((), 2, plan.settings)


def test_a_studys_steps_carry_its_run_id_and_each_batchs_pinned_mask(tiny_lm, tmp_path):
    """A study's batches sample through seed_dish: every live step names the study's run (it named
    none before), and its pinned mask is the batch's (the stored trajectory's anchor mask)."""
    from petri.runs.store import RunStore
    from petri.study.execution.runner import run_study
    from petri.study.schema import study_from_dict
    from study_support import study_dict

    study = study_from_dict(study_dict("plan-study", "Plan study", templates=1))
    steps = []
    result = run_study(tiny_lm, StudyPlan(study, samples=2, seed=1, settings=SamplerSettings(max_denoising_steps=3)),
                       RunStore(tmp_path / "store"), watch=Watch(on_step=steps.append))
    stored = [traj for _, _, traj in RunStore(tmp_path / "store").load_events(result.run_id)]
    assert len(steps) == sum(int(t.steps.max()) for t in stored) and len(stored) == 4
    assert {step.run_id for step in steps} == {result.run_id}
    at = 0
    for traj in stored:  # the batches ran in plan order, each for its own number of steps
        for step in steps[at: at + int(traj.steps.max())]:
            np.testing.assert_array_equal(step.pinned, traj.anchor_mask)
        at += int(traj.steps.max())
