"""The probe on the service (a tiny random model, the real read): a read is one stored ``probe`` run
owned by its caller; an evaluation job that a crash stops keeps every read it committed, and the
process that starts next marks its run and job ``interrupted`` with those reads still there."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from petri.app.probe import EvalSettings
from petri.core.probe import ProbeInputError, request_from_dict
from petri.engine.probe import plan_probe
from petri.runs.formats import RESULT_TABLES
from petri.runs.store import RunStore
from petri.study.probe.probe_set import LabelledItem, LabelledSet
from tests.app.test_jobs import wait_until

REQUEST = {"prompt": "Only 90 units are in stock.", "frame": "ok {{consistent}}",
           "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}]}


def test_a_read_is_one_stored_probe_run_of_its_owner_and_a_refusal_stores_none(service):
    done = service.probe(plan_probe(service.lm, request_from_dict(REQUEST)), owner="alice")
    assert service.store.get_run(done.run_id)["kind"] == "probe"
    assert service.store.owns_run(done.run_id, "alice") and not service.store.owns_run(done.run_id, "bob")
    assert service.store.load_results(done.run_id)["read"]["answers"] == done.result.answers()
    with pytest.raises(ProbeInputError) as refused:
        service.probe(plan_probe(service.lm, request_from_dict({**REQUEST, "frame": "no slot"})), owner="alice")
    assert refused.value.field == "frame" and len(service.store.list_runs()) == 1


def test_an_evaluation_a_crash_stops_keeps_its_reads_and_is_marked_interrupted_after(service):
    questions = request_from_dict(REQUEST).questions
    items = tuple(LabelledItem(str(i), f"Event number {i}.", None, {"consistent": "no"}) for i in range(300))
    labelled = LabelledSet("many", questions, "ok {{consistent}}", None, items)
    job = service.submit_probe_eval(labelled, EvalSettings(steps=2))
    wait_until(lambda: job.done >= 3, "three items read", timeout=120)
    # the process dies here; the next one opens the same store (its start marks what was left running)
    restarted = RunStore(Path(service.store_path).parent)
    runs, jobs = restarted.mark_unfinished_interrupted()
    assert (runs, jobs) == (1, 1)
    run = restarted.get_run(job.run_id)
    assert run["status"] == "interrupted" and restarted.get_job(job.job_id)["status"] == "interrupted"
    kept = pd.concat(list(RESULT_TABLES["predictions"].chunks(restarted.load_results(job.run_id))))
    read = kept["item_id"].tolist()
    assert len(read) >= 3 and read == [str(i) for i in range(len(read))]  # every read before the crash, in order
