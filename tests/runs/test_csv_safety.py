"""Every CSV the project writes is safe to open in a spreadsheet: a text cell a person wrote
(concepts, events, templates, group labels) that begins with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return is written with a leading ``'`` (OWASP's advice against CSV injection), and the
raw value stays in the JSON sidecar. Checked on the files the real writers wrote: the API's CSV
route, the UI's and the CLI's seed downloads (:func:`petri.web.api.responses.write_run_files`, the
same :func:`petri.runs.export.write_tables` as ``petri seed --out``) and a study's folder
(:func:`petri.study.results.report.write_study`)."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from petri.app.service import PetriService
from petri.core.trajectory import SamplerSettings
from petri.runs.store import RunStore
from petri.study.plan import StudyPlan
from petri.study.results.report import write_study
from petri.study.schema import study_from_dict
from petri.web.api.responses import write_run_files
from petri.web.app import create_app

CONCEPTS = ['=HYPERLINK("http://example.invalid","x")', "+SUM(1,1)", "-2+3", "@SUM(A1)"]
EVENT = "=1+1 and the order shipped"
GROUPS = ["=cmd|' /C calc'!A0", "+benign"]
TEMPLATE = "-{event} Describe {concepts}."
#: A quoted CSV field (every text field is quoted) that starts with a formula character. A quote
#: inside a field is doubled, so ``,"=`` or a line-leading ``"=`` can only open a field.
FORMULA_FIELD = re.compile(r'(?:^|,)"[=+\-@\t\r]', re.MULTILINE)


def formula_fields(text: str) -> list[str]:
    return [text[max(m.start() - 20, 0):m.end() + 20] for m in FORMULA_FIELD.finditer(text)]


def test_the_pattern_finds_a_raw_formula_and_passes_a_neutralised_one():
    assert formula_fields('"a","=1+1"\n') and formula_fields('"+x",1\n') and formula_fields('1,"\tx"')
    assert not formula_fields('"a","\'=1+1",-2.5\n"b ""=x"""\n')


@pytest.fixture(scope="module")
def wide_lm():
    """A tiny random model with room on its canvas for long concepts."""
    from petri.engine.torch.tiny import tiny_random_model

    return tiny_random_model(canvas_length=128)


@pytest.fixture(scope="module")
def hostile_run(wide_lm, tmp_path_factory):
    service = PetriService(wide_lm, RunStore(tmp_path_factory.mktemp("csv-safety")))
    app = create_app(service, ui=False)
    body = {"concepts": CONCEPTS, "template": TEMPLATE, "samples": 2, "seed": 3,
            "events": [{"event": EVENT, "group": GROUPS[0]}, {"event": "@the second event", "group": GROUPS[1]}],
            "settings": {"max_denoising_steps": 3}}
    with TestClient(app) as client:
        posted = client.post("/api/seed", json=body)
        assert posted.status_code == 200, posted.text
        run_id = posted.json()["run_id"]
        served = {name: client.get(f"/api/runs/{run_id}/{name}.csv").text for name in posted.json()["csv"]}
    yield service, run_id, served
    service.shutdown()


def test_the_api_csvs_neutralise_every_formula(hostile_run):
    _, _, served = hostile_run
    assert set(served) == {"positions", "segments", "samples", "pairs"}
    for name, text in served.items():
        assert formula_fields(text) == [], name
    assert "\"'=1+1 and the order shipped\"" in served["samples"]
    assert "\"'=cmd|' /C calc'!A0\"" in served["positions"]
    assert "'=HYPERLINK(" in served["positions"] and "'@SUM(A1)" in served["samples"]
    assert "\"'-{event} Describe {concepts}.\"" in served["pairs"]


def test_the_seed_downloads_neutralise_and_keep_the_raw_values_in_the_sidecar(hostile_run, tmp_path):
    service, run_id, _ = hostile_run
    stored = service.store.load_events(run_id)
    paths = write_run_files(run_id, [t for _, _, t in stored], [g for _, g, _ in stored], tmp_path)
    csvs = [p for p in paths if p.suffix == ".csv"]
    assert len(csvs) == 4
    for path in csvs:
        assert formula_fields(path.read_text(encoding="utf-8")) == [], path.name
    side = json.loads(next(p for p in paths if p.name == "run.json").read_text(encoding="utf-8"))
    raw = side["csv_neutralised"]
    assert EVENT in raw["samples"]["event"] and GROUPS[0] in raw["positions"]["group"]
    assert set(CONCEPTS) <= set(raw["positions"]["concept"])
    assert raw["samples"]["template"] and raw["samples"]["template"][0].startswith("-")


def test_a_study_folder_neutralises_every_csv_and_keeps_the_raw_values(wide_lm, tmp_path):
    study = study_from_dict({
        "id": "hostile", "title": "Hostile", "language": "en", "concepts": CONCEPTS[:3],
        "groups": GROUPS, "comparison": {"groups": GROUPS},
        "templates": [{"id": "t1", "text": TEMPLATE}],
        "events": [{"id": "e1", "group": GROUPS[0], "text": EVENT},
                   {"id": "e2", "group": GROUPS[0], "text": "@a second event"},
                   {"id": "e3", "group": GROUPS[1], "text": "+a benign event"},
                   {"id": "e4", "group": GROUPS[1], "text": "a plain event"}],
    })
    service = PetriService(wide_lm, RunStore(tmp_path / "store"))
    result = service.run_study(StudyPlan(study, samples=2, seed=1, settings=SamplerSettings(max_denoising_steps=3)))
    out = write_study(result, tmp_path / "out", images=False)
    csvs = sorted((tmp_path / "out").glob("*.csv"))
    assert {p.stem for p in csvs} >= {"positions", "segments", "samples", "pairs", "events", "templates", "jaccard"}
    for path in csvs:
        assert formula_fields(path.read_text(encoding="utf-8")) == [], path.name
    assert "\"'-{event} Describe {concepts}.\"" in (tmp_path / "out" / "templates.csv").read_text(encoding="utf-8")
    side = json.loads(out.tables["run"].read_text(encoding="utf-8"))
    assert GROUPS[0] in side["csv_neutralised"]["events"]["group"]
    assert EVENT in side["csv_neutralised"]["events"]["event"]
    assert side["study"]["templates"][0]["text"] == TEMPLATE  # the raw template, as written
    service.shutdown()


def test_a_streamed_table_is_the_whole_table_one_event_at_a_time(hostile_run, wide_lm):
    """The API streams each CSV one event at a time; joined, the chunks are the table written whole."""
    from petri.runs.export import TABLES, run_table, token_decoder, write_csv
    from petri.runs.formats import table_bytes

    service, run_id, served = hostile_run
    stored = service.store.load_events(run_id)
    trajectories, groups = [t for _, _, t in stored], [g for _, g, _ in stored]
    decoder = token_decoder(wide_lm.tokenizer, wide_lm.model_id, trajectories)
    for name in TABLES:
        chunks = [c.decode("utf-8") for c in table_bytes(trajectories, name, "csv", groups, decoder)]
        assert len(chunks) == len(trajectories) == 2
        assert "".join(chunks) == write_csv(run_table(trajectories, name, groups, decoder)) == served[name]


def test_positions_carry_each_final_tokens_text_neutralised(hostile_run, wide_lm):
    """``final_token`` beside ``final_token_id`` is that id decoded by the model's tokenizer (a
    formula-leading one with its ``'``)."""
    import csv
    import io

    _, _, served = hostile_run
    rows = list(csv.DictReader(io.StringIO(served["positions"])))
    assert rows and len({r["final_token_id"] for r in rows}) > 5
    for row in rows:
        text = wide_lm.tokenizer.decode([int(row["final_token_id"])])
        assert row["final_token"] == ("'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text)
