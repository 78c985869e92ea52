"""The stored per-step record over HTTP: ``steps.csv`` / ``steps.parquet`` hold one row per (event,
sample, step run, position) whose token ids are the per-step argmax of ``include_trajectories``, the
GIF has one frame per step of the chosen sample, the figure comes as HTML, and a bad event, sample or
run is refused naming it."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from petri.app.service import PetriService
from petri.engine.torch.tiny import tiny_random_model
from petri.runs.store import RunStore
from petri.web.app import create_app

EVENTS = [{"event": "Only 90 units are in stock, but a customer ordered 120.", "group": "contradictory"},
          {"event": "The order shipped.", "group": "benign"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    lm = tiny_random_model(canvas_length=16, seed=2)
    app = create_app(PetriService(lm, RunStore(tmp_path_factory.mktemp("store"))), ui=False)
    body = {"concepts": ["order", "inventory", "person"], "samples": 3, "seed": 5, "events": EVENTS,
            "settings": {"max_denoising_steps": 6}}
    with TestClient(app) as client:
        run = client.post("/api/seed", json=body)
        assert run.status_code == 200, run.text
        run_id = run.json()["run_id"]
        full = client.get(f"/api/runs/{run_id}", params={"include_trajectories": True}).json()
        yield client, lm, run_id, full


def expected_rows(full: dict) -> list[tuple[int, int, int, int, int]]:
    """(event, sample, step, position, token id) from the API's per-step argmax, in order."""
    return [(e, s["sample"], t, i, tok) for e, ev in enumerate(full["events"]) for s in ev["samples"]
            for t, row in enumerate(s["argmax"]) for i, tok in enumerate(row)]


def test_steps_csv_and_parquet_equal_include_trajectories(served):
    client, lm, run_id, full = served
    csv_table = pd.read_csv(io.StringIO(client.get(f"/api/runs/{run_id}/steps.csv").text), keep_default_na=False)
    parquet = pd.read_parquet(io.BytesIO(client.get(f"/api/runs/{run_id}/steps.parquet").content))
    want = expected_rows(full)
    assert len(want) == sum(s["steps"] for ev in full["events"] for s in ev["samples"]) * 16
    for table in (csv_table, parquet):
        got = list(table[["event_index", "sample", "step", "position", "token_id"]].itertuples(index=False, name=None))
        assert got == want
        assert table["group"].tolist() == [EVENTS[e]["group"] for e, *_ in want]
        texts = {int(i): lm.tokenizer.decode([int(i)]) for i in set(table["token_id"])}
        if table is csv_table:  # a CSV cell a spreadsheet would run as a formula carries a leading ' (Parquet: raw)
            texts = {i: "'" + t if t[:1] in ("=", "+", "-", "@", "\t", "\r") else t for i, t in texts.items()}
        assert table["token_text"].tolist() == [texts[int(i)] for i in table["token_id"]]
    pd.testing.assert_frame_equal(csv_table[["entropy"]], parquet[["entropy"]], check_exact=False, rtol=1e-6)
    assert csv_table["accepted"].tolist() == parquet["accepted"].tolist()
    assert csv_table["anchor"].tolist() == parquet["anchor"].tolist()
    # the anchors where the API says each sample's concepts sit
    for e, ev in enumerate(full["events"]):
        for s in ev["samples"]:
            rows = parquet[(parquet["event_index"] == e) & (parquet["sample"] == s["sample"]) & (parquet["step"] == 0)]
            for a in s["anchors"]:
                assert set(rows[rows["anchor"] == a["concept"]]["position"]) == set(range(a["start"], a["end"]))


def test_gif_has_one_frame_per_step_of_the_sample(served):
    client, _, run_id, full = served
    for event, sample in [(0, 0), (1, 2)]:
        r = client.get(f"/api/runs/{run_id}/replay.gif", params={"event": event, "sample": sample})
        assert r.status_code == 200 and r.headers["content-type"] == "image/gif"
        gif = Image.open(io.BytesIO(r.content))
        assert gif.n_frames == full["events"][event]["samples"][sample]["steps"]


def test_trajectory_figure_as_html_and_refusals(served):
    client, _, run_id, _ = served
    r = client.get(f"/api/runs/{run_id}/trajectory.html", params={"sample": 1})
    assert r.status_code == 200 and "plotly" in r.text and "sample 1: every step" in r.text
    assert client.get(f"/api/runs/{run_id}/trajectory.pdf").status_code == 404
    bad = client.get(f"/api/runs/{run_id}/replay.gif", params={"sample": 3})
    assert bad.status_code == 422 and "sample" in bad.text
    bad = client.get(f"/api/runs/{run_id}/trajectory.html", params={"event": 2})
    assert bad.status_code == 422 and "event" in bad.text
    assert client.get("/api/runs/0123456789abcdef/steps.csv").status_code == 404


def test_cli_replay_writes_a_gif_a_table_and_the_figure(tmp_path):
    from petri.cli.main import main as cli_main

    lm = tiny_random_model(canvas_length=16, seed=4)
    folder = tmp_path / "tiny-ckpt"
    lm.tokenizer.save_pretrained(folder)  # the CLI only needs the tokenizer
    store = RunStore(tmp_path / "store")
    service = PetriService(lm, store)
    from petri.app.service import SeedEvent
    from petri.core.dish import Dish
    from petri.core.trajectory import SamplerSettings

    result = service.seed(service.plan([SeedEvent(Dish(concepts=("order", "inventory"), event="The order shipped."))], 3,
                          SamplerSettings(max_denoising_steps=5, stability_threshold=None, confidence_threshold=None), seed=1))
    store.close()
    traj = result.trajectories[0]
    args = ["replay", result.run_id, "--store", str(tmp_path / "store"), "--tokenizer", str(folder)]
    assert cli_main(args + ["--sample", "2", "--out", str(tmp_path / "t.gif")]) == 0
    assert Image.open(tmp_path / "t.gif").n_frames == int(traj.steps[2]) == 5
    assert cli_main(args + ["--out", str(tmp_path / "t.parquet")]) == 0
    table = pd.read_parquet(tmp_path / "t.parquet")
    assert len(table) == int(traj.steps.sum()) * 16
    np.testing.assert_array_equal(table[table["sample"] == 1]["token_id"].to_numpy(), traj.argmax[1].ravel())
    assert cli_main(args + ["--out", str(tmp_path / "t.html")]) == 0
    assert "every step" in (tmp_path / "t.html").read_text()
    assert cli_main(args + ["--sample", "3", "--out", str(tmp_path / "x.gif")]) == 2  # refused, naming the sample
    assert cli_main(args + ["--out", str(tmp_path / "x.pdf")]) == 2


def test_on_a_public_server_only_the_owner_gets_the_record(tmp_path):
    from petri.web.access import CALLER_HEADER, AccessPolicy

    app = create_app(PetriService(tiny_random_model(canvas_length=16), RunStore(tmp_path / "store")), ui=False,
                     access=AccessPolicy(public=True))
    body = {"concepts": ["order", "inventory"], "samples": 1, "seed": 1, "event": "The order shipped.",
            "settings": {"max_denoising_steps": 2}}
    with TestClient(app) as client:
        a = client.post("/api/seed", json=body)
        run_id, owner = a.json()["run_id"], {CALLER_HEADER: a.headers[CALLER_HEADER]}
        other = {CALLER_HEADER: client.post("/api/seed", json=body).headers[CALLER_HEADER]}
        for path in ("steps.csv", "steps.parquet", "replay.gif", "trajectory.html"):
            assert client.get(f"/api/runs/{run_id}/{path}", headers=owner).status_code == 200, path
            assert client.get(f"/api/runs/{run_id}/{path}", headers=other).status_code == 404, path
            assert client.get(f"/api/runs/{run_id}/{path}").status_code == 404, path
