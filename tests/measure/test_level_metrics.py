"""Issue 61, item 3: a segment, pair or event metric is one registration. One register_metric call
in this test (no other file touched) puts a toy segment metric into the segments table, a run's
segments.csv, the API's answer (and its OpenAPI schema) and the CSV the API serves; likewise a toy pair
metric into the pairs table and ``pairs``, and a toy event metric into ``preservation``. Unregistering
takes each out of all of them again."""

from __future__ import annotations

import io
from collections import Counter

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from petri.core.dish import Dish
from petri.engine.seeding import seed_dish
from petri.measure.level_metrics import LevelMetric, metrics, register_metric, unregister_metric
from petri.measure.metrics import flip_counts, segments
from petri.measure.tables import pairs_table, segments_table
from petri.runs.export import write_run
from petri.web.app import create_app

SEGMENT = "segment_flips"  # all flips over the segment's positions
PAIR = "segments_seen"  # the pair's segments, empty ones included
EVENT = "flips_free"  # all flips of the event's samples (anchors flip 0 times)
CONCEPTS = ["order", "person", "stock"]
EVENT_TEXT = "The order was packed."


@pytest.fixture()
def toy_metrics():
    """The three toy metrics, one registration each (removed after the test)."""
    made = [
        register_metric(LevelMetric(SEGMENT, "segment", "all flips over the segment", int,
                                    lambda s: [int(s.flips[g.sample, g.start:g.end].sum()) for g in s.segments[0]],
                                    unit="flips")),
        register_metric(LevelMetric(PAIR, "pair", "the pair's segments, empty ones included", int,
                                    lambda s: [Counter(g.pair for g in s.segments[0])[p] for p in s.pair_segments])),
        register_metric(LevelMetric(EVENT, "event", "all flips of the event", int, lambda s: int(s.flips.sum()))),
    ]
    yield made
    for metric in made:
        unregister_metric(metric.level, metric.column)


@pytest.fixture()
def trajectory(tiny_lm):
    return seed_dish(tiny_lm, Dish(tuple(CONCEPTS), EVENT_TEXT), 4, tiny_lm.default_settings(), seed=3)


def hand_segment_flips(traj) -> list[int]:
    """The toy segment metric by its definition, from flips and segments computed directly (no summary)."""
    flips = flip_counts(traj.argmax, traj.steps, traj.anchor_mask)
    return [int(flips[g.sample, g.start:g.end].sum()) for g in segments(traj.anchors)]


def hand_pair_counts(traj) -> dict[str, int]:
    """The toy pair metric by its definition: each sorted pair's segments, counted from the anchors."""
    return dict(sorted(Counter("|".join(sorted((g.left, g.right))) for g in segments(traj.anchors)).items()))


def test_the_tables_and_the_csv_export_show_the_toy_metrics(toy_metrics, trajectory, tmp_path):
    want = hand_segment_flips(trajectory)
    assert sum(want) > 0  # the seed flips inside segments: the check is not 0 == 0
    table = segments_table(trajectory)
    assert list(table.columns)[-2:] == ["instability", SEGMENT] and table[SEGMENT].tolist() == want
    pairs = pairs_table(trajectory)
    assert list(pairs.columns)[-3:] == ["n_segments", "instability", PAIR]
    assert dict(zip(pairs["pair"], pairs[PAIR])) == hand_pair_counts(trajectory)
    written = write_run([trajectory], tmp_path / "out")
    assert pd.read_csv(written["segments"])[SEGMENT].tolist() == want
    csv_pairs = pd.read_csv(written["pairs"])
    assert dict(zip(csv_pairs["pair"], csv_pairs[PAIR])) == hand_pair_counts(trajectory)


def test_the_api_answers_documents_and_serves_the_toy_metrics(toy_metrics, service):
    app = create_app(service, ui=False)
    with TestClient(app) as client:
        answer = client.post("/api/seed", json={"concepts": CONCEPTS, "event": EVENT_TEXT, "samples": 3, "seed": 4})
        assert answer.status_code == 200, answer.text
        event = answer.json()["events"][0]
        run_id = answer.json()["run_id"]
        read = client.get(f"/api/runs/{run_id}").json()["events"][0]
        served = client.get(f"/api/runs/{run_id}/segments.csv").text
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    flips = [s["flips"] for s in event["samples"]]  # the answer's own flips
    want = [sum(flips[g["sample"]][g["start"]:g["end"]]) for g in event["segments"]]
    assert sum(want) > 0 and [g[SEGMENT] for g in event["segments"]] == want
    counts = Counter("|".join(sorted((g["left"], g["right"]))) for g in event["segments"])
    assert {p["pair"]: p[PAIR] for p in event["pairs"]} == counts
    assert event["preservation"][EVENT] == sum(map(sum, flips))
    assert list(event["segments"][0]) == ["sample", "left", "right", "start", "end", "length", "instability", SEGMENT]
    assert read["segments"] == event["segments"] and read["pairs"] == event["pairs"]  # a stored run reads back
    assert read["preservation"] == event["preservation"]
    assert pd.read_csv(io.StringIO(served))[SEGMENT].tolist() == want
    assert schemas["SegmentOut"]["properties"][SEGMENT]["description"] == "all flips over the segment"
    assert PAIR in schemas["PairOut"]["required"] and EVENT in schemas["PreservationOut"]["properties"]


def test_unregistering_removes_them_and_the_answer_is_as_before(trajectory, service):
    before = list(segments_table(trajectory).columns), list(pairs_table(trajectory).columns)
    metric = register_metric(LevelMetric(SEGMENT, "segment", "x", float, lambda s: s.segments[1]))
    assert list(segments_table(trajectory).columns) == [*before[0], SEGMENT]
    unregister_metric("segment", SEGMENT)
    assert metric not in metrics("segment")
    assert (list(segments_table(trajectory).columns), list(pairs_table(trajectory).columns)) == before
    with TestClient(create_app(service, ui=False)) as client:
        event = client.post("/api/seed", json={"concepts": CONCEPTS[:2], "event": EVENT_TEXT, "samples": 1}).json()
    segment = event["events"][0]["segments"][0]
    assert list(segment) == ["sample", "left", "right", "start", "end", "length", "instability"]
    assert list(event["events"][0]["pairs"][0]) == ["pair", "concepts", "n_segments", "instability"]
    assert list(event["events"][0]["preservation"]) == ["anchors", "intact", "intact_share", "mean_agreement"]


def test_a_metric_is_refused_by_its_bad_field():
    with pytest.raises(ValueError, match="already a column"):
        register_metric(LevelMetric("instability", "segment", "again", float, lambda s: s.segments[1]))
    with pytest.raises(ValueError, match="already a column"):
        register_metric(LevelMetric("pair", "pair", "a key", str, lambda s: []))
    with pytest.raises(ValueError, match="level"):
        LevelMetric("x", "token", "x", float, lambda s: [])
    with pytest.raises(ValueError, match="dtype"):
        LevelMetric("x", "pair", "x", list, lambda s: [])


def test_a_metric_with_the_wrong_number_of_values_is_refused_by_name(trajectory):
    register_metric(LevelMetric("short", "pair", "one value too few", float, lambda s: [0.0] * (len(s.pair_segments) - 1)))
    try:
        with pytest.raises(ValueError, match="pair metric 'short'"):
            pairs_table(trajectory)
    finally:
        unregister_metric("pair", "short")
