"""``POST /api/probe`` over HTTP on a tiny random model (the real read, nothing mocked): a read
answers what the engine's own read gives and is stored as a ``probe`` run that the runs routes read
back (document, CSVs with formulas neutralised); every refusal of issue 50's "Bad input" is a 422
naming the field that stores nothing; a labelled set becomes a ``probe-eval`` job (done, cancelled);
on a public server another caller cannot read a probe run or its tables."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from petri.app.service import PetriService
from petri.core.probe import request_from_dict
from petri.engine.probe import read_slots
from petri.runs.store import RunStore
from petri.web.access import CALLER_HEADER, AccessPolicy
from petri.web.app import create_app
from service_support import model_held
from tests.app.test_jobs import wait_until
from tests.web.api.test_job_api import poll_final

EVENT = "Only 90 units are in stock, but a customer ordered 120."


def read_body(**changes) -> dict:
    body = {"prompt": EVENT, "frame": "ok {{consistent}}",
            "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}], "steps": 2, "samples": 2, "seed": 3}
    return {**body, **changes}


def set_body(**changes) -> dict:
    body = {"frame": "ok {{consistent}}", "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}],
            "items": [{"id": "a", "prompt": EVENT, "gold": {"consistent": "no"}},
                      {"id": "b", "prompt": "The order was packed and shipped.", "gold": {"consistent": "yes"}}]}
    return {**body, **changes}


@pytest.fixture(scope="module")
def service(served):
    """The module's service (``served``, tests/web/conftest.py), under the name the tests read."""
    return served


@pytest.fixture(scope="module")
def client(service):
    with TestClient(create_app(service, ui=False)) as c:
        yield c


def stored(service) -> tuple[int, int]:
    """(runs, jobs) in the store."""
    return len(service.store.list_runs(1000)), len(service.store.list_jobs(limit=1000, any_owner=True))


def test_a_read_answers_what_the_engine_reads_and_is_stored_as_a_probe_run(client, service, tiny_lm):
    body = read_body()
    answer = client.post("/api/probe", json=body)
    assert answer.status_code == 200, answer.text
    out = answer.json()
    direct = read_slots(tiny_lm, request_from_dict({k: v for k, v in body.items()}))  # the engine, no service
    assert out["kind"] == "probe" and out["status"] == "done"
    assert [r["step"] for r in out["read"]["reads"]] == [0, 1]
    for got, want in zip(out["read"]["reads"], direct.reads):
        assert got["probs"] == pytest.approx(want.probs.tolist(), abs=1e-12)
        assert got["answer"] == want.answer and got["draws"] == 2
        assert sum(got["probs"]) == pytest.approx(1.0)
    run = client.get(f"/api/runs/{out['run_id']}").json()
    assert run["kind"] == "probe" and run["probe"]["read"] == out["read"]
    assert set(run["csv"]) == {"reads", "top_k"}
    reads = pd.read_csv(io.StringIO(client.get(out["csv"]["reads"]).text))
    # one row per step × alternative, its probability the one the response gave
    assert list(zip(reads["step"], reads["alternative"])) == [(0, "yes"), (0, "no"), (1, "yes"), (1, "no")]
    assert reads["probability"].tolist() == pytest.approx([p for r in out["read"]["reads"] for p in r["probs"]])
    top = pd.read_csv(io.StringIO(client.get(out["csv"]["top_k"]).text), keep_default_na=False)
    assert len(top) == 2 * 5 and top["rank"].tolist() == [1, 2, 3, 4, 5] * 2
    listed = [r for r in client.get("/api/runs").json() if r["run_id"] == out["run_id"]]
    assert listed and listed[0]["kind"] == "probe"


def test_thirty_alternatives_are_read_past_the_26_letters(client):
    alternatives = [f"choice{i}" for i in range(30)]
    body = read_body(frame="{{pick}}", questions=[{"name": "pick", "alternatives": alternatives}], steps=1, samples=1)
    answer = client.post("/api/probe", json=body)
    assert answer.status_code == 200, answer.text
    read = answer.json()["read"]["reads"][0]
    assert len(read["probs"]) == len(set(read["labels"])) == 30 and sum(read["probs"]) == pytest.approx(1.0)


def test_a_formula_in_an_alternative_is_neutralised_in_the_csv(client):
    body = read_body(questions=[{"name": "consistent", "alternatives": ["=HYPERLINK(1)", "no"], "labels": ["a", "b"]}],
                     frame="{{consistent}}", steps=1)
    answer = client.post("/api/probe", json=body)
    assert answer.status_code == 200, answer.text
    text = client.get(answer.json()["csv"]["reads"]).text
    assert "\"'=HYPERLINK(1)\"" in text and ",\"=HYPERLINK" not in text


BAD = {
    # more alternatives than the tiny tokenizer has single-token labels (62 bare ones)
    "too many alternatives": (read_body(frame="{{q}}", questions=[{"name": "q", "alternatives": [f"x{i}" for i in range(63)]}]),
                              ["body", "questions", 0, "alternatives"]),
    "a label of three tokens": (read_body(questions=[{"name": "consistent", "alternatives": ["yes", "no"],
                                                      "labels": ["yes yes yes", "b"]}]),
                                ["body", "questions", 0, "labels"]),
    "a question of one alternative": (read_body(questions=[{"name": "consistent", "alternatives": ["yes"]}]),
                                      ["body", "questions", 0, "alternatives"]),
    "a question of no alternative": (read_body(questions=[{"name": "consistent", "alternatives": []}]),
                                     ["body", "questions", 0, "alternatives"]),
    "ask_if naming no question": (read_body(questions=[{"name": "consistent", "alternatives": ["yes", "no"],
                                                        "ask_if": {"ghost": "yes"}}]),
                                  ["body", "questions", 0, "ask_if"]),
    "an ask_if cycle": (read_body(frame="{{a}} {{b}}", questions=[
        {"name": "a", "alternatives": ["yes", "no"], "ask_if": {"b": "yes"}},
        {"name": "b", "alternatives": ["yes", "no"], "ask_if": {"a": "no"}}]), ["body", "questions", 0, "ask_if"]),
    "a slot outside the canvas": (read_body(frame="ok " * 20 + "{{consistent}}"), ["body", "frame"]),
    "a question's slot not in the frame": (read_body(questions=[{"name": "consistent", "slot": "other",
                                                                 "alternatives": ["yes", "no"]}]),
                                           ["body", "questions", 0, "slot"]),
    "a pin over the slot": (read_body(frame="{{consistent}}", pins=[{"text": "order", "at": 0}]), ["body", "pins", 0]),
    "a pin past the canvas": (read_body(pins=[{"text": "order", "at": 16}]), ["body", "pins", 0]),
    "a frame longer than the canvas": (read_body(frame="{{consistent}} " + "word " * 40), ["body", "frame"]),
    "a labelled set over the limit": (set_body(items=[{"prompt": "x", "gold": {}}] * 2001), ["body", "items"]),
    "a gold answer not among the alternatives": (set_body(items=[{"prompt": EVENT, "gold": {"consistent": "maybe"}}]),
                                                 ["body", "items", 0, "gold", "consistent"]),
    "an item's own frame longer than the canvas": (set_body(items=[{"prompt": EVENT, "frame": "{{consistent}} " + "word " * 40,
                                                                    "gold": {"consistent": "no"}}]),
                                                   ["body", "items", 0, "frame"]),
    "a labelled set's frame with no slot": (set_body(frame="no slot here"), ["body", "frame"]),
    "an unknown shipped set": ({"set": "no-such-set"}, ["body", "set"]),
    "a shipped set given a frame": ({"set": "x", "frame": "{{a}}"}, ["body", "frame"]),
    "a read given repeats": (read_body(repeats=3), ["body", "repeats"]),
    # issue 59: the order, its N, min_mass and a slot that no question reads
    "an unknown order": (read_body(order="sorted"), ["body", "order"]),
    "permutations with N below the range": (read_body(order="permutations:1"), ["body", "order"]),
    "permutations with N above the range": (read_body(order="permutations:33"), ["body", "order"]),
    "a set's unknown order": (set_body(order="backwards"), ["body", "order"]),
    "a set's N out of range": (set_body(order="permutations:0"), ["body", "order"]),
    "min_mass below 0": (read_body(min_mass=-0.1), ["body", "min_mass"]),
    "min_mass above 1": (read_body(min_mass=1.5), ["body", "min_mass"]),
    "a set's min_mass above 1": (set_body(min_mass=2), ["body", "min_mass"]),
    "min_mass as text": (read_body(min_mass="0.5"), ["body", "min_mass"]),
    "a frame slot no question reads": (read_body(frame="Consistent: {{consistent}} Why: {{why}}"), ["body", "frame"]),
    "a set's frame slot no question reads": (set_body(frame="{{consistent}} {{why}}"), ["body", "frame"]),
}


def test_the_unread_slot_and_the_order_are_named_in_the_message(client):
    detail = client.post("/api/probe", json=read_body(frame="Consistent: {{c}} Why: {{why}}", questions=[
        {"name": "c", "alternatives": ["yes", "no"]}])).json()["detail"]
    assert any("{{why}}" in d["msg"] for d in detail), detail
    detail = client.post("/api/probe", json=read_body(order="permutations:99")).json()["detail"]
    assert any("2 to 32" in d["msg"] for d in detail), detail


def test_a_cyclic_read_with_min_mass_answers_null_below_it_and_says_so_in_its_tables(client, service, tiny_lm):
    """The tiny model's mass on two labels is far under 0.5: the default min_mass answers null,
    min_mass 0 answers; the read is cyclic (two orders), as the engine reads it."""
    body = read_body(order="cyclic", steps=1)
    out = client.post("/api/probe", json=body).json()
    (read,) = out["read"]["reads"]
    direct = read_slots(tiny_lm, request_from_dict(body)).reads[0]
    assert read["answer"] is None and read["min_mass"] == 0.5 and read["orders"] == 2
    assert read["probs"] == pytest.approx(direct.probs.tolist(), abs=1e-12)
    assert read["spread"] == pytest.approx(direct.spread.tolist(), abs=1e-12)
    assert out["read"]["answers"] == {"consistent": None}
    table = pd.read_csv(io.StringIO(client.get(out["csv"]["reads"]).text), keep_default_na=False)
    assert set(table["answer"]) == {""} and not table["answered"].astype(str).eq("True").any()
    parquet = pd.read_parquet(io.BytesIO(client.get(out["csv"]["reads"].replace(".csv", ".parquet")).content))
    assert parquet["answer"].isna().all()
    assert list(table["spread"]) == pytest.approx(read["spread"])
    answered = client.post("/api/probe", json=read_body(order="cyclic", steps=1, min_mass=0)).json()
    assert answered["read"]["reads"][0]["answer"] in ("yes", "no")


@pytest.mark.parametrize("case", list(BAD))
def test_each_bad_input_is_a_422_naming_the_field_and_stores_nothing(client, service, case):
    body, loc = BAD[case]
    before = stored(service)
    answer = client.post("/api/probe", json=body)
    assert answer.status_code == 422, (case, answer.text)
    assert loc in [d["loc"][: len(loc)] for d in answer.json()["detail"]], (case, answer.json())
    assert stored(service) == before, case


def test_a_labelled_set_is_a_job_whose_evaluation_the_runs_routes_read(client, service):
    answer = client.post("/api/probe", json=set_body(min_mass=0))
    assert answer.status_code == 202, answer.text
    state = poll_final(client, answer.json()["job_id"])
    assert state["status"] == "done" and state["kind"] == "probe-eval", state
    assert state["progress"] == {"done": 2, "total": 2, "unit": "item"}
    run = client.get(f"/api/runs/{state['run_id']}").json()
    assert run["kind"] == "probe-eval" and run["status"] == "done"
    assert set(run["csv"]) == {"predictions", "summary", "reliability"}
    predictions = pd.read_csv(io.StringIO(client.get(run["csv"]["predictions"]).text))
    assert sorted(predictions["item_id"].astype(str)) == ["a", "b"]
    assert (predictions["correct"] == (predictions["answer"] == predictions["gold"])).all()
    summary = pd.read_csv(io.StringIO(client.get(run["csv"]["summary"]).text))
    assert summary["n"].tolist() == [2] and summary["accuracy"].tolist() == [predictions["correct"].mean()]
    assert predictions["orders"].tolist() == [2, 2]  # a labelled set is read in every cyclic order unless told
    assert summary["coverage"].tolist() == [1.0]
    # a probe read's table of an evaluation run: not its kind's
    assert client.get(f"/api/runs/{state['run_id']}/reads.csv").status_code == 404


def evaluation_run(client, **changes) -> str:
    """The run id of a finished evaluation of ``set_body(**changes)``."""
    answer = client.post("/api/probe", json=set_body(**changes))
    assert answer.status_code == 202, answer.text
    state = poll_final(client, answer.json()["job_id"])
    assert state["status"] == "done", state
    return state["run_id"]


def test_two_stored_evaluations_compare_item_by_item_with_the_exact_mcnemar_test(client):
    from scipy.stats import binomtest

    items = [{"id": f"i{n}", "prompt": f"Event {n}: {EVENT}" if n % 2 else f"Event {n}: the order shipped.",
              "gold": {"consistent": "no" if n % 2 else "yes"}} for n in range(8)]
    # as listed, always answering: the alternatives listed the other way round move a model that follows the letter
    first = evaluation_run(client, items=items, order="as_listed", min_mass=0)
    second = evaluation_run(client, items=items, questions=[{"name": "consistent", "alternatives": ["no", "yes"]}],
                            order="as_listed", min_mass=0)
    answer = client.get("/api/probe/compare", params={"a": first, "b": second})
    assert answer.status_code == 200, answer.text
    found = answer.json()
    # worked from the two runs' own predictions CSVs: which items each got right, the discordant pairs
    right = [pd.read_csv(io.StringIO(client.get(f"/api/runs/{run}/predictions.csv").text)).set_index("item_id")["correct"]
             for run in (first, second)]
    a_only = sorted(i for i in right[0].index if right[0][i] and not right[1][i])
    b_only = sorted(i for i in right[0].index if right[1][i] and not right[0][i])
    assert a_only and b_only  # the case exercises both kinds of discordant item
    (question,) = found["questions"]
    assert (question["n"], question["a_correct"], question["b_correct"]) == (8, right[0].sum(), right[1].sum())
    assert sorted(d["item_id"] for d in found["discordant"]) == sorted(a_only + b_only)
    expected_p = binomtest(len(a_only), len(a_only) + len(b_only), 0.5).pvalue if a_only or b_only else 1.0
    assert question["mcnemar"]["p_value"] == pytest.approx(expected_p)
    assert found["labels"] == [first[:8], second[:8]]


def test_a_comparison_refuses_a_run_that_is_not_an_evaluation_naming_its_parameter(client):
    evaluation = evaluation_run(client)
    read = client.post("/api/probe", json=read_body()).json()["run_id"]
    refused = client.get("/api/probe/compare", params={"a": evaluation, "b": read})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", "b"], refused.text
    assert client.get("/api/probe/compare", params={"a": "f" * 32, "b": evaluation}).status_code == 404


def test_a_queued_evaluation_cancelled_never_runs(client, service):
    with model_held(service):
        answer = client.post("/api/probe", json=set_body())
        assert answer.status_code == 202
        job_id = answer.json()["job_id"]
        assert client.delete(f"/api/jobs/{job_id}").status_code == 200
        state = poll_final(client, job_id)  # while the model is still held: it never started
    assert state["status"] == "cancelled" and state["run_id"] is None and state["started"] is None


def test_a_running_evaluation_cancelled_stops_keeps_what_it_read_and_its_run_says_so(client, service):
    items = [{"id": str(i), "prompt": f"{EVENT} ({i})", "gold": {"consistent": "no"}} for i in range(200)]
    answer = client.post("/api/probe", json=set_body(items=items, steps=4))
    job_id = answer.json()["job_id"]
    wait_until(lambda: client.get(f"/api/jobs/{job_id}").json()["progress"]["done"] >= 1, "the first item", timeout=60)
    client.delete(f"/api/jobs/{job_id}")
    state = poll_final(client, job_id)
    assert state["status"] == "cancelled" and 1 <= state["progress"]["done"] < 200
    assert service.store.get_run(state["run_id"])["status"] == "cancelled"
    # nothing read is lost: the cancelled run's predictions hold one row per item read before the stop
    kept = pd.read_csv(io.StringIO(client.get(f"/api/runs/{state['run_id']}/predictions.csv").text))
    assert kept["item_id"].astype(str).tolist() == [str(i) for i in range(state["progress"]["done"])]


def test_on_a_public_server_another_caller_cannot_read_a_probe_run(tiny_lm, tmp_path):
    svc = PetriService(tiny_lm, RunStore(tmp_path))  # not the module's service: its own, public server
    with TestClient(create_app(svc, ui=False, access=AccessPolicy(public=True))) as c:
        answer = c.post("/api/probe", json=read_body())
        assert answer.status_code == 200, answer.text
        mine = {CALLER_HEADER: answer.headers[CALLER_HEADER]}
        other = {CALLER_HEADER: "o" * 30}
        run_id = answer.json()["run_id"]
        for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}/reads.csv", f"/api/runs/{run_id}/top_k.parquet"):
            assert c.get(path, headers=mine).status_code == 200, path
            assert c.get(path, headers=other).status_code == 404, path
        assert [r["run_id"] for r in c.get("/api/runs", headers=other).json()] == []
        job = c.post("/api/probe", json=set_body(), headers=mine).json()
        assert c.get(f"/api/jobs/{job['job_id']}", headers=other).status_code == 404
        assert c.delete(f"/api/jobs/{job['job_id']}", headers=other).status_code == 404
        state = poll_final(c, job["job_id"], headers=mine)
        assert c.get(f"/api/runs/{state['run_id']}/predictions.csv", headers=other).status_code == 404
        assert c.get(f"/api/runs/{state['run_id']}/predictions.csv", headers=mine).status_code == 200
    svc.shutdown()
