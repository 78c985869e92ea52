"""A paired (within-event) study over HTTP: the study job endpoint runs every condition of every event;
a condition naming an unknown concept is a 422 that names the field, and nothing is stored."""

from __future__ import annotations

import copy

from tests.web.api.test_job_api import poll_final

SERVE_UI = False
STUDY = {
    "id": "paired-api", "title": "Paired over HTTP", "language": "en",
    "concepts": ["order", "inventory", "person", "stock", "cat", "dog"],
    "conditions": [{"id": "fitting"}, {"id": "unrelated"}],
    "templates": [{"id": "t1", "text": "Event: {event}\nDescribe {concepts}."}],
    "events": [{"id": f"e0{i}", "group": "everyday", "text": text, "concepts": ["order", "inventory", "person"],
                "conditions": {"unrelated": {"concepts": ["stock", "cat", "dog"]}}}
               for i, text in enumerate(["A customer placed an order.", "The store counted its inventory."], start=1)],
}


def body(study: dict) -> dict:
    return {"study": study, "samples": 2, "seed": 3, "settings": {"max_denoising_steps": 4}}


def test_a_condition_naming_an_unknown_concept_is_a_422_naming_the_field_and_nothing_is_stored(client, served):
    bad = copy.deepcopy(STUDY)
    bad["events"][1]["conditions"]["unrelated"]["concepts"] = ["stock", "cat", "tax"]
    before = served.store.list_runs()
    for url in ("/api/study", "/api/jobs/study"):
        r = client.post(url, json=body(bad))
        assert r.status_code == 422, r.text
        detail = r.json()["detail"][0]
        assert detail["loc"] == ["body", "study", "events[1] (id 'e02').conditions.unrelated.concepts"]
        assert "unknown concept 'tax'" in detail["msg"]
    assert served.store.list_runs() == before


def test_the_study_job_runs_every_condition_of_every_event(client, served):
    submitted = client.post("/api/jobs/study", json=body(STUDY))
    assert submitted.status_code == 202, submitted.text
    state = poll_final(client, submitted.json()["job_id"])
    assert state["status"] == "done" and state["progress"]["total"] == 2 * 1 * 2
    keys = served.store.completed_events(state["run_id"])
    assert keys == {f"{e}::t1::{c}" for e in ("e01", "e02") for c in ("fitting", "unrelated")}
