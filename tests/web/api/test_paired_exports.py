"""A paired study's rows say which condition they were sampled under in every export of a run, not only
in its study folder: ``GET /api/runs/{id}/{table}.{fmt}`` (positions, segments, samples, pairs, steps;
CSV and Parquet) and ``petri replay --out steps.csv``, with the study folder's column name and placement
(:func:`petri.runs.export.with_condition`). The expected condition of each row is read from the study
file written below (each (event, condition) has its own text, and ``d100`` its own concepts), not from
the code under test. An unpaired study's exports get no such column."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from petri.app.service import PetriService
from petri.runs.store import RunStore
from petri.study.execution import runner
from petri.study.plan import StudyPlan
from petri.study.schema import study_from_dict
from petri.web.app import create_app
from tests.study.test_study_run import SETTINGS, one_thread  # noqa: F401 (one intra-op thread, autouse)

DOSE = {
    "id": "tiny-dose-export", "title": "Tiny dose study, exported", "language": "en",
    "concepts": ["order", "inventory", "person", "stock"],
    "conditions": [{"id": "d000", "dose": 0}, {"id": "d050", "dose": 0.5}, {"id": "d100", "dose": 1}],
    "templates": [{"id": "t1", "text": "Event: {event}\nDescribe {concepts}."}],
    "events": [
        {"id": "e01", "group": "everyday", "text": "A customer placed an order.", "concepts": ["order", "person"],
         "conditions": {"d050": {"text": "A violin placed an order."},
                        "d100": {"text": "A violin glued an oven.", "concepts": ["stock", "inventory"]}}},
        {"id": "e02", "group": "everyday", "text": "The store counted its inventory.", "concepts": ["order", "person"],
         "conditions": {"d050": {"text": "The glacier counted its inventory."},
                        "d100": {"text": "The glacier taxed its tuba.", "concepts": ["stock", "inventory"]}}},
    ],
}
#: by hand from DOSE: each (event, condition) text -> (condition, dose)
BY_TEXT = {
    "A customer placed an order.": ("d000", 0.0), "A violin placed an order.": ("d050", 0.5),
    "A violin glued an oven.": ("d100", 1.0), "The store counted its inventory.": ("d000", 0.0),
    "The glacier counted its inventory.": ("d050", 0.5), "The glacier taxed its tuba.": ("d100", 1.0),
}
#: by hand from DOSE: the concepts each condition pins
CONCEPTS = {"d000": {"order", "person"}, "d050": {"order", "person"}, "d100": {"stock", "inventory"}}
UNPAIRED = {
    "id": "tiny-groups-export", "title": "Tiny two-group study", "language": "en", "concepts": ["order", "person"],
    "templates": [{"id": "t1", "text": "Event: {event}\nDescribe {concepts}."}],
    "events": [{"id": "a1", "group": "benign", "text": "A customer placed an order."},
               {"id": "a2", "group": "benign", "text": "A person placed an order."},
               {"id": "b1", "group": "contradictory", "text": "The order was placed and never placed."},
               {"id": "b2", "group": "contradictory", "text": "No person placed the order a person placed."}],
}
SAMPLES = 2


@pytest.fixture(scope="module")
def stored(tiny_lm, tmp_path_factory):
    """(app client, store folder, paired run id, unpaired run id): both studies run into one store."""
    folder = tmp_path_factory.mktemp("exports")
    store = RunStore(folder / "store")
    paired = runner.run_study(tiny_lm, StudyPlan(study_from_dict(DOSE), samples=SAMPLES, seed=3, settings=SETTINGS), store)
    unpaired = runner.run_study(tiny_lm, StudyPlan(study_from_dict(UNPAIRED), samples=SAMPLES, seed=3, settings=SETTINGS), store)
    service = PetriService(tiny_lm, store)
    with TestClient(create_app(service, ui=False)) as client:
        yield client, folder, paired.run_id, unpaired.run_id
    service.shutdown()


def fetched(client, run_id: str, table: str, fmt: str = "csv") -> pd.DataFrame:
    r = client.get(f"/api/runs/{run_id}/{table}.{fmt}")
    assert r.status_code == 200, r.text
    return pd.read_csv(io.StringIO(r.text)) if fmt == "csv" else pd.read_parquet(io.BytesIO(r.content))


def condition_of_event(client, run_id: str) -> dict[int, tuple[str, float]]:
    """event_index -> (condition, dose), read by hand from each event's text in the samples table."""
    samples = fetched(client, run_id, "samples")
    return {int(i): BY_TEXT[text] for i, text in samples.groupby("event_index")["event"].first().items()}


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_every_table_of_a_paired_run_names_each_rows_condition_and_dose(stored, fmt):
    client, _, run_id, _ = stored
    expected = condition_of_event(client, run_id)
    assert sorted(expected.values()) == sorted(BY_TEXT.values())  # all 6 (event, condition) batches
    for table, after in [("samples", "template"), ("pairs", "template"), ("positions", "group"), ("segments", "group"),
                         ("steps", "group")]:
        frame = fetched(client, run_id, table, fmt)
        columns = list(frame.columns)
        at = columns.index(after) + 1
        assert columns[at:at + 2] == ["condition", "dose"], (table, columns)
        got = list(zip(frame["condition"], frame["dose"]))
        assert got == [expected[int(i)] for i in frame["event_index"]], table
        assert set(frame["condition"]) == {"d000", "d050", "d100"}, table
    samples = fetched(client, run_id, "samples", fmt)
    assert [BY_TEXT[t] for t in samples["event"]] == list(zip(samples["condition"], samples["dose"]))
    positions = fetched(client, run_id, "positions", fmt)
    pinned = positions[positions["is_anchor"].astype(bool)]
    for condition, rows in pinned.groupby("condition"):  # the concepts each condition pins, from the study file
        assert set(rows["concept"]) == CONCEPTS[condition], condition


def test_the_study_folder_and_the_api_put_the_condition_in_the_same_place(stored, tiny_lm, tmp_path):
    """The study folder's samples: ..., template_id, condition, dose, model_id; the run's: ..., template,
    condition, dose, model_id (the condition follows the columns that name the row's event and template)."""
    from petri.study.results.report import write_study

    client, folder, run_id, _ = stored
    result = runner.run_study(tiny_lm, StudyPlan(study_from_dict(DOSE), samples=SAMPLES, seed=3, settings=SETTINGS),
                              RunStore(folder / "store"))
    assert result.run_id == run_id and result.computed == 0  # the same run, resumed from the store
    write_study(result, tmp_path / "out", images=False)
    for table in ("samples", "segments", "positions", "pairs"):
        study = list(pd.read_csv(tmp_path / "out" / f"{table}.csv", nrows=1).columns)
        served = list(fetched(client, run_id, table).columns)
        i, j = study.index("condition"), served.index("condition")
        assert study[i:i + 3] == served[j:j + 3] == ["condition", "dose", "model_id"], table
        assert study[i - 1] == "template_id" and served[j - 1] in ("template", "group"), table


def test_petri_replay_writes_the_steps_of_a_paired_run_with_their_condition(stored, tiny_lm, tmp_path):
    from petri.cli.main import main

    client, folder, run_id, _ = stored
    tokenizer = tmp_path / "tok"
    tiny_lm.tokenizer.save_pretrained(tokenizer)
    out = tmp_path / "steps.csv"
    assert main(["replay", run_id, "--store", str(folder / "store"), "--tokenizer", str(tokenizer), "--out", str(out)]) == 0
    steps = pd.read_csv(out)
    expected = condition_of_event(client, run_id)
    assert list(steps.columns[:4]) == ["event_index", "group", "condition", "dose"]
    assert list(zip(steps["condition"], steps["dose"])) == [expected[int(i)] for i in steps["event_index"]]


def test_an_unpaired_studys_exports_get_no_condition_column(stored, tiny_lm):
    """...and are byte for byte the tables of its trajectories as any other run's are written."""
    from petri.runs.export import token_decoder
    from petri.runs.formats import table_bytes

    client, folder, _, run_id = stored
    events = RunStore(folder / "store").load_events(run_id)
    trajectories, groups = [t for _, _, t in events], [g for _, g, _ in events]
    decode = token_decoder(tiny_lm.tokenizer, tiny_lm.model_id, trajectories)
    for table in ("samples", "pairs", "positions", "segments", "steps"):
        r = client.get(f"/api/runs/{run_id}/{table}.csv")
        columns = list(pd.read_csv(io.StringIO(r.text), nrows=1).columns)
        assert "condition" not in columns and "dose" not in columns, (table, columns)
        assert {"event_index", "group"} <= set(columns), (table, columns)
        assert r.text == b"".join(table_bytes(trajectories, table, "csv", groups, decode)).decode("utf-8"), table
