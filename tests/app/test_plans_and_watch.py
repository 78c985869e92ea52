"""Issue 61, item 1: a study and a probe read are planned once where the request enters (a
:class:`~petri.study.plan.StudyPlan`, a :class:`~petri.core.plan.ProbePlan`), so a bad request is
refused before the model is asked; what the caller watches a run through is one
:class:`~petri.core.watch.Watch`; the seed, study and probe paths take their arguments keyword-only."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import petri.study.schema as schema
from petri.core.cancel import Cancelled, CancelToken
from petri.core.dish import Dish
from petri.core.plan import SeedEvent
from petri.core.trajectory import SamplerSettings
from petri.core.watch import Watch
from petri.study.plan import StudyPlan
from petri.study.schema import StudyError, study_from_dict
from petri.web.app import create_app
from service_support import model_held
from study_support import study_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import path_params  # noqa: E402

READ = {"prompt": "Only 90 units are in stock.", "frame": "ok {{consistent}}",
        "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}]}
STUDY = study_dict("plans", "Plans", templates=2)


def test_a_study_plan_checks_its_fields_when_made():
    study = study_from_dict(STUDY)
    with pytest.raises(ValueError, match="samples must be >= 1, got 0"):
        StudyPlan(study, samples=0)
    with pytest.raises(StudyError, match="templates") as refused:
        StudyPlan(study, templates=["t1", "nope"])
    assert "nope" in str(refused.value)
    plan = StudyPlan(study, templates=["t2", "t1"])  # a list is kept as a tuple; the study's order is run
    assert plan.templates == ("t2", "t1") and plan.template_ids == ("t1", "t2")
    assert StudyPlan(study).template_ids == ("t1", "t2")


def test_a_study_whose_noun_analyser_is_missing_is_a_422_naming_the_language_while_the_model_is_busy(
        service, monkeypatch):
    """The plan is made at the edge: the refusal comes before the lock (a 503 busy before) and
    names the field (a 500 before: the runner raised it under the lock)."""
    monkeypatch.setattr(schema, "analyser_problem", lambda method: f"the {method} analyser is not installed")
    with TestClient(create_app(service, ui=False)) as client, model_held(service):
        answer = client.post("/api/study", json={"study": STUDY, "samples": 1, "settings": {"max_denoising_steps": 2}})
        queued = client.post("/api/jobs/study", json={"study": STUDY, "samples": 1})
    for response in (answer, queued):
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", "study", "language"]
        assert "analyser is not installed" in response.json()["detail"][0]["msg"]
    assert service.store.list_runs(10) == []


def test_a_probe_read_is_planned_before_the_model_is_asked(service):
    """A frame with no slot is refused naming ``frame`` while another job holds the model (a 503
    busy before, when the read checked its request under the lock); a good read is planned and read."""
    with TestClient(create_app(service, ui=False)) as client:
        with model_held(service):
            refused = client.post("/api/probe", json={**READ, "frame": "no slot here"})
        read = client.post("/api/probe", json={**READ, "order": "cyclic"})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"][-1] == "frame"
    assert read.status_code == 200, read.text
    assert len(service.store.list_runs(10)) == 1


def test_a_queued_job_refuses_a_watch_that_brings_its_own_cancel(service):
    """A job is stopped through its queue; a caller's token would never be seen."""
    plan = service.plan([SeedEvent(Dish(("order", "person"), "x"))], 1, SamplerSettings(max_denoising_steps=2))
    with pytest.raises(ValueError, match="watch.cancel"):
        service.submit_seed(plan, watch=Watch(cancel=CancelToken()))
    with pytest.raises(ValueError, match="watch.cancel"):
        service.submit_study(StudyPlan(study_from_dict(STUDY), samples=1), watch=Watch(cancel=CancelToken()))
    assert service.jobs.queued == 0 and service.store.list_runs(10) == []


def test_a_synchronous_seed_is_stopped_by_its_watchs_token(service):
    token = CancelToken()

    def stop_at_step_one(step):
        if step.index == 1:
            token.cancel("cancelled")

    plan = service.plan([SeedEvent(Dish(("order", "person"), "x"))], 1, SamplerSettings(max_denoising_steps=20))
    with pytest.raises(Cancelled):
        service.seed(plan, watch=Watch(on_step=stop_at_step_one, cancel=token))
    assert service.store.get_run(plan.run_id)["status"] == "cancelled"


SUBJECTS = {"service", "lm", "model", "plan", "request", "store"}


@pytest.mark.parametrize("name", [n for names in path_params.PATHS.values() for n in names])
def test_the_paths_take_everything_but_their_subjects_keyword_only(name):
    """No positional ``None``/``False`` chains: after the service, model, plan (or request) and store,
    every parameter of the seed, study and probe paths is keyword-only."""
    fn = path_params.target(name)
    assert fn is not None, name
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    positional = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert set(positional) <= SUBJECTS, (name, positional)
