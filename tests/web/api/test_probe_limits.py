"""One validation per probe request, one definition of each limit (issue 61, item 2): a seed of 2³¹
and of 2³²−1 is read, and one of 2³² refused naming ``seed``, alike by ``POST /api/probe``,
``petri probe --request`` and the core's :func:`~petri.core.probe.request_from_dict`; a probe
text of 20,000 characters passes every edge's check and one of 20,001 is refused naming the field;
the seed's bound is the range numpy's legacy seeding takes (the reference here, with torch's);
an inline labelled set becomes the same :class:`~petri.study.probe.probe_set.LabelledSet` as its JSONL
file, refusing what the file's parser refuses, naming the same field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from petri.cli.main import main
from petri.core.probe import MAX_TEXT_CHARS, ProbeInputError, request_from_dict
from petri.core.settings import MAX_SEED
from petri.study.probe.probe_set import parse_jsonl
from petri.web.api.probe_requests import ProbeIn, prepare_evaluation, read_request
from petri.web.app import create_app
from petri.web.limits import MAX_PROBE_REPEATS, MAX_PROBE_TEXT_CHARS
from tests.web.api.test_probe_api import read_body, set_body

SEEDS = {2**31: True, 2**32 - 1: True, 2**32: False}


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served, ui=False)) as c:
        yield c


def test_the_seed_bound_is_numpys_legacy_range_and_torch_takes_its_derived_seeds():
    assert MAX_SEED == 2**32 - 1
    np.random.seed(MAX_SEED)
    with pytest.raises(ValueError):
        np.random.seed(MAX_SEED + 1)
    torch.manual_seed(MAX_SEED + MAX_PROBE_REPEATS)  # an evaluation's last repeat reads seed + r


@pytest.mark.parametrize("seed, accepted", SEEDS.items())
def test_a_seed_is_accepted_or_refused_alike_by_http_cli_and_core(client, tmp_path, capsys, seed, accepted):
    answer = client.post("/api/probe", json=read_body(seed=seed, steps=1, samples=1))
    assert (answer.status_code == 200) is accepted, answer.text
    if not accepted:
        assert answer.status_code == 422 and ["body", "seed"] in [d["loc"] for d in answer.json()["detail"]]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(read_body(seed=seed, steps=1, samples=1)))
    assert main(["probe", "--request", str(path), "--model", "petri-tiny", "--min-mass", "0"]) == (0 if accepted else 2)
    captured = capsys.readouterr()
    assert (json.loads(captured.out)["request"]["seed"] == seed) if accepted else "seed:" in captured.err
    if accepted:
        assert request_from_dict(read_body(seed=seed)).seed == seed
    else:
        with pytest.raises(ProbeInputError, match=f"^seed: must be between 0 and {MAX_SEED}"):
            request_from_dict(read_body(seed=seed))


def test_a_labelled_sets_seed_over_the_bound_is_refused_by_the_cli_and_http(client, capsys):
    assert main(["probe", "--set", "unused.jsonl", "--model", "petri-tiny", "--seed", str(MAX_SEED + 1)]) == 2
    assert "--seed: must be between 0 and 4294967295" in capsys.readouterr().err
    answer = client.post("/api/probe", json=set_body(seed=MAX_SEED + 1))
    assert answer.status_code == 422 and ["body", "seed"] in [d["loc"] for d in answer.json()["detail"]]


@pytest.mark.parametrize("field", ["prompt", "frame", "instructions"])
def test_a_probe_text_has_one_limit_at_every_edge(field):
    assert MAX_PROBE_TEXT_CHARS == MAX_TEXT_CHARS == 20_000
    longest = "{{consistent}}" + "x" * (MAX_TEXT_CHARS - 14) if field == "frame" else "x" * MAX_TEXT_CHARS
    assert getattr(read_request(read_body(**{field: longest})), field) == longest
    assert getattr(request_from_dict(read_body(**{field: longest})), field) == longest
    with pytest.raises(ProbeInputError, match=f"^{field}: is {MAX_TEXT_CHARS + 1} characters"):
        request_from_dict(read_body(**{field: longest + "x"}))
    with pytest.raises(ValueError) as refused:  # pydantic's ValidationError
        read_request(read_body(**{field: longest + "x"}))
    assert [e["loc"] for e in refused.value.errors()] == [(field,)]


def test_the_http_refuses_a_prompt_over_the_limit_naming_it(client):
    answer = client.post("/api/probe", json=read_body(prompt="x" * (MAX_TEXT_CHARS + 1)))
    assert answer.status_code == 422 and [d["loc"] for d in answer.json()["detail"]] == [["body", "prompt"]]


def test_an_inline_set_is_the_set_its_jsonl_file_holds():
    body = set_body(instructions="Answer briefly.", items=[
        {"id": "a", "prompt": "One.", "gold": {"consistent": "no"}},
        {"prompt": "Two.", "frame": "so {{consistent}}", "gold": {}}])
    labelled, _ = prepare_evaluation(ProbeIn.model_validate(body))
    header = {"probe_set": "inline", "frame": body["frame"], "instructions": body["instructions"],
              "questions": [{"name": "consistent", "slot": "consistent", "alternatives": ["yes", "no"]}]}
    lines = [header, {"id": "a", "prompt": "One.", "gold": {"consistent": "no"}},
             {"id": "1", "prompt": "Two.", "frame": "so {{consistent}}", "gold": {}}]
    assert labelled == parse_jsonl("\n".join(json.dumps(line) for line in lines))


@pytest.mark.parametrize("items, field", [
    ([{"id": "a", "prompt": "x", "gold": {"consistent": "maybe"}}], "items[0].gold.consistent"),
    ([{"id": "a", "prompt": "x", "gold": {"ghost": "yes"}}], "items[0].gold.ghost"),
    ([{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}], "items[1].id"),
    ([{"id": "a", "prompt": "   "}], "items[0].prompt"),
])
def test_an_inline_set_is_refused_where_its_file_is_naming_the_same_field(items, field):
    with pytest.raises(ProbeInputError) as inline:
        prepare_evaluation(ProbeIn.model_validate(set_body(items=items)))
    header = {"frame": "ok {{consistent}}", "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}]}
    with pytest.raises(ProbeInputError) as from_file:
        parse_jsonl("\n".join(json.dumps(line) for line in [header, *items]))
    assert inline.value.field == from_file.value.field == field
    assert str(inline.value) == str(from_file.value)
