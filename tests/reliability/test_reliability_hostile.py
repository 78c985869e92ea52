"""Hostile input against the whole served app (API + Gradio UI) on a live loopback server.

- Fuzzing from the OpenAPI schema with schemathesis: every operation, schema-valid and
  schema-invalid data; no answer is a 5xx, every request answers within its timeout, invalid data
  is refused with a 4xx, and 2xx answers match the documented schema. ``PETRI_FUZZ_EXAMPLES``
  examples per operation and mode (25; 300 with ``PETRI_HEAVY=1``).
- A property test with realistic valid requests (random concepts, unicode events, any settings in
  the documented limits): 200 with self-consistent results, or a 422 naming the field.
- Explicit cases: oversized bodies (413), deeply nested JSON, huge numbers, unicode edge cases
  (lone surrogates, bidirectional overrides, zero-width characters, emoji, NUL), control
  characters, format-string templates, path-like run ids and table names, fields that name
  files or models; each refused with the field named.
- The server never loads a model or opens a file named by a request (an audit hook sees every
  ``open`` of the process while such requests are served; model loaders are booby-trapped).
- The server binds to 127.0.0.1 by default.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import negative_data_rejection, not_a_server_error, response_schema_conformance

import petri.web.server as app_module
from petri.app.service import PetriService
from petri.runs.store import RunStore
from petri.web.app import create_app
from petri.web.limits import MAX_BODY_BYTES, MAX_SEED
from reliability_support import HEAVY
from service_support import model_held

FUZZ_EXAMPLES = int(os.environ.get("PETRI_FUZZ_EXAMPLES", "300" if HEAVY else "25"))
REQUEST_TIMEOUT_S = 60
CANVAS = 16
EVENT = "Only 90 units are in stock, but a customer ordered 120."
#: requests sent per part of this module, printed at the end for RELIABILITY.md (``pytest -s``)
TRIED: Counter = Counter()


@pytest.fixture(scope="module")
def service(tiny_lm, tmp_path_factory):
    return PetriService(tiny_lm, RunStore(tmp_path_factory.mktemp("hostile-store")))


class StatusRecorder:
    """ASGI wrapper that records the status of every response the server sends (``statuses``), so
    "no server error" is checked on the server side for every request of the module."""

    def __init__(self, app):
        self.app = app
        self.statuses: Counter = Counter()

    async def __call__(self, scope, receive, send):
        async def recording_send(message):
            if message["type"] == "http.response.start":
                self.statuses[message["status"]] += 1
            await send(message)

        await self.app(scope, receive, recording_send)


@pytest.fixture(scope="module")
def server(service, live_server):
    recorder = StatusRecorder(create_app(service))  # the whole app, UI mounted, as served
    with live_server(recorder) as live:
        yield live
    print(f"\nhostile inputs tried: {dict(TRIED)} (total {sum(TRIED.values())}); "
          f"statuses served: {dict(recorder.statuses)}")
    # every response of the module, whatever test sent it: never a 5xx but the busy 503s provoked on purpose
    assert sum(recorder.statuses.values()) >= sum(n for part, n in TRIED.items() if not part.startswith("wide"))
    server_errors = {code: n for code, n in recorder.statuses.items() if code >= 500}
    assert server_errors == ({503: TRIED["busy"]} if TRIED["busy"] else {}), dict(recorder.statuses)


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as c:
        yield c


def seed_body(**changes) -> dict:
    body = {"concepts": ["order", "inventory", "person"], "event": EVENT, "samples": 2,
            "settings": {"max_denoising_steps": 3}, "seed": 1}
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def locs(response: httpx.Response) -> list[list]:
    detail = response.json()["detail"]
    assert isinstance(detail, list) and all(e["msg"] for e in detail), detail
    return [e["loc"] for e in detail]


# ----------------------------------------------------------------------------------- schema fuzzing


def _clamp(case) -> None:
    """Keep schema-valid bodies cheap (few samples, steps, events) so a run fits in CI's time."""
    body = case.body
    if not isinstance(body, dict):
        return
    if isinstance(body.get("samples"), int) and not isinstance(body["samples"], bool):
        body["samples"] = max(1, min(body["samples"], 3))
    if isinstance(body.get("events"), list):
        body["events"] = body["events"][:3]
    if isinstance(body.get("settings"), dict):
        steps = body["settings"].get("max_denoising_steps")
        if isinstance(steps, int) and not isinstance(steps, bool):
            body["settings"]["max_denoising_steps"] = max(1, min(steps, 6))


#: (operation, generation mode) pairs for which hypothesis can generate no case at all, so it
#: raises Unsatisfiable: an operation without parameters or body has no invalid (negative) input.
NOTHING_TO_VARY = {("GET /api/health", "NEGATIVE")}


def test_schemathesis_fuzz_finds_no_server_error_and_no_hang(server, service):
    schema = schemathesis.openapi.from_dict(httpx.get(server.url + "/openapi.json", timeout=60).json())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {"POST /api/seed", "POST /api/study", "GET /api/runs/{run_id}"}
    statuses: Counter = Counter()
    unsatisfiable = set()
    import requests

    with requests.Session() as session:
        for operation in operations:
            for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
                checks = [not_a_server_error, response_schema_conformance]
                if mode.is_negative:
                    checks.append(negative_data_rejection)

                @given(case=operation.as_strategy(generation_mode=mode))
                @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=not HEAVY,
                          suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
                def fuzz(case):  # run in this iteration (fuzz() below), so it reads this mode and these checks
                    if mode.is_positive:  # noqa: B023
                        _clamp(case)
                    response = case.call(base_url=server.url, session=session, timeout=REQUEST_TIMEOUT_S)
                    statuses[response.status_code] += 1
                    TRIED["schemathesis"] += 1
                    case.validate_response(response, checks=checks)  # noqa: B023

                try:
                    fuzz()
                except Unsatisfiable:  # only where there is nothing to generate (listed below)
                    if (operation.label, mode.name) not in NOTHING_TO_VARY:
                        raise
                    unsatisfiable.add((operation.label, mode.name))
    assert unsatisfiable == NOTHING_TO_VARY  # the list stays exact
    assert not any(code >= 500 for code in statuses), statuses
    assert statuses[200] and statuses[422], statuses
    assert not service.busy


CONCEPT_POOL = ["order", "inventory", "person", "lamp", "stock", "shipment", "Ünïcödé", "日本", "😀", "שָׁלוֹם", "a b"]
EVENT_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1, max_size=120)
SETTINGS = st.fixed_dictionaries({}, optional={
    "max_denoising_steps": st.integers(1, 6),
    "t_min": st.floats(0.01, 10), "t_max": st.floats(0.01, 10),
    "entropy_bound": st.floats(0, 1e6), "stability_threshold": st.integers(0, 16),
    "confidence_threshold": st.floats(0, 1e3), "adaptive_stop": st.booleans(), "pin_thought_channel": st.booleans(),
})


@given(
    concepts=st.lists(st.sampled_from(CONCEPT_POOL), min_size=2, max_size=3, unique=True),
    event=EVENT_TEXT,
    samples=st.integers(1, 3),
    seed=st.integers(0, MAX_SEED),
    shuffle=st.booleans(),
    trajectories=st.booleans(),
    sampler=SETTINGS,
)
@settings(max_examples=12 if not HEAVY else 200, deadline=None, database=None, derandomize=not HEAVY,
          suppress_health_check=list(HealthCheck))
def test_any_valid_request_runs_or_names_a_field(server, concepts, event, samples, seed, shuffle, trajectories, sampler):
    if not event.strip():
        event = "x" + event
    body = {"concepts": concepts, "event": event, "samples": samples, "seed": seed, "shuffle": shuffle,
            "include_trajectories": trajectories, "settings": {"max_denoising_steps": 4, **sampler}}
    r = httpx.post(server.url + "/api/seed", json=body, timeout=REQUEST_TIMEOUT_S)
    TRIED["valid property"] += 1
    assert r.status_code in (200, 422), (r.status_code, r.text[:500])
    if r.status_code == 422:
        assert all(loc[0] == "body" and len(loc) >= 2 for loc in locs(r)), r.text
        return
    run = r.json()
    steps_cap = body["settings"]["max_denoising_steps"]
    for sample in run["events"][0]["samples"]:
        assert len(sample["flips"]) == CANVAS and 1 <= sample["steps"] <= steps_cap
        assert sorted(a["concept"] for a in sample["anchors"]) == sorted(concepts)
        assert all(sample["flips"][a["start"]] == 0 and 0 <= a["agreement"] <= 1 for a in sample["anchors"])
        if trajectories:
            assert len(sample["argmax"]) == sample["steps"] and len(sample["argmax"][0]) == CANVAS
    for segment in run["events"][0]["segments"]:
        assert segment["instability"] is None or (math.isfinite(segment["instability"]) and segment["instability"] >= 0)


# ----------------------------------------------------------------------------------- explicit cases

NESTED = "[" * 100_000 + "]" * 100_000
BIG_INT = "9" * 5000
RAW_CASES = {
    # name: (raw body, expected status, expected loc)
    "deeply nested JSON (100k)": (NESTED, 400, ["body"]),
    "deeply nested object in a field": ('{"concepts":["a","b"],"event":"x","settings":' + '{"a":' * 5000 + "1" + "}" * 5000 + "}", 400,
                                        ["body"]),
    "nested 500 deep inside a field": (json.dumps(seed_body(settings=json.loads("[" * 500 + "]" * 500))), 422, ["body", "settings"]),
    "integer of 5000 digits": ('{"concepts":["a","b"],"event":"x","seed":' + BIG_INT + "}", 400, ["body"]),
    "seed 10**30": (json.dumps(seed_body(seed=10**30)), 422, ["body", "seed"]),
    "samples 10**30": (json.dumps(seed_body(samples=10**30)), 422, ["body", "samples"]),
    "samples -10**30": (json.dumps(seed_body(samples=-10**30)), 422, ["body", "samples"]),
    "t_min 1e308": (json.dumps(seed_body(settings={"t_min": 1e308})), 422, ["body", "settings", "t_min"]),
    "t_max 1e-320 (overflows the logits)": (json.dumps(seed_body(settings={"t_max": 1e-320})), 422, ["body", "settings", "t_max"]),
    "t_max 1e999 (inf)": ('{"concepts":["a","b"],"event":"x","settings":{"t_max":1e999}}', 422, ["body", "settings", "t_max"]),
    "NaN": ('{"concepts":["a","b"],"event":"x","settings":{"entropy_bound":NaN}}', 422, ["body", "settings", "entropy_bound"]),
    "-Infinity": ('{"concepts":["a","b"],"event":"x","settings":{"t_min":-Infinity}}', 422, ["body", "settings", "t_min"]),
    "steps 1e308 (float for int)": (json.dumps(seed_body(settings={"max_denoising_steps": 1e308})), 422,
                                    ["body", "settings", "max_denoising_steps"]),
    "position 10**30": (json.dumps(seed_body(positions=[10**30, 0, 8])), 422, ["body", "positions", 0]),
    "lone surrogate in a concept": ('{"concepts":["order","\\ud800"],"event":"x"}', 422, ["body", "concepts", 1]),
    "lone surrogate in the event": ('{"concepts":["order","person"],"event":"a\\udfffb"}', 422, ["body", "event"]),
    "lone surrogate in a key": ('{"concepts":["order","person"],"event":"x","\\ud800":1}', 422, ["body"]),
    "lone surrogate in the template": ('{"concepts":["order","person"],"event":"x","template":"\\udbff{event}"}', 422,
                                       ["body", "template"]),
    "invalid UTF-8 bytes": (b'{"concepts":["order","\xff\xfe"],"event":"x"}', 400, ["body"]),
    "truncated JSON": ('{"concepts":["order","person"],"event":"x"', 422, ["body"]),
    "a JSON array": ("[1, 2, 3]", 422, ["body"]),
    "a JSON string": ('"order"', 422, ["body"]),
    "empty body": ("", 422, ["body"]),
}


@pytest.mark.parametrize("case", list(RAW_CASES))
def test_malformed_bodies_are_refused_naming_the_field(client, case):
    raw, status, loc = RAW_CASES[case]
    r = client.post("/api/seed", content=raw, headers={"content-type": "application/json"})
    TRIED["explicit body"] += 1
    assert r.status_code == status, (case, r.status_code, r.text[:400])
    assert any(found[: len(loc)] == loc for found in locs(r)), (case, r.text[:400])
    assert len(r.content) < 20_000, "the error echoes the hostile input back"


FIELD_CASES = {
    # name: (changes to a valid body, expected loc)
    "NUL in a concept": ({"concepts": ["order", "inv\x00entory"]}, ["body", "concepts", 1]),
    "escape character in a concept": ({"concepts": ["order", "\x1b[31mred"]}, ["body", "concepts", 1]),
    "DEL in a concept": ({"concepts": ["order", "inv\x7f"]}, ["body", "concepts", 1]),
    "C1 control (NEL) in a concept": ({"concepts": ["order", "a\x85b"]}, ["body", "concepts", 1]),
    "tab in a concept": ({"concepts": ["order", "in\tventory"]}, ["body", "concepts", 1]),
    "carriage return in a group": ({"group": "benign\r"}, ["body", "group"]),
    "right-to-left override in a concept": ({"concepts": ["order", "\u202eredro"]}, ["body", "concepts", 1]),
    "zero-width space in a concept": ({"concepts": ["order", "per\u200bson"]}, ["body", "concepts", 1]),
    "zero-width joiner emoji in a concept": ({"concepts": ["order", "👨\u200d👩\u200d👧"]}, ["body", "concepts", 1]),
    "byte-order mark as a concept": ({"concepts": ["\ufeff", "order"]}, ["body", "concepts", 0]),
    "look-alike duplicate (case)": ({"concepts": ["order", "ORDER"]}, ["body", "concepts", 1]),
    "right-to-left override in a group": ({"group": "benign\u202e"}, ["body", "group"]),
    "NUL in the event": ({"event": "stock\x00120"}, ["body", "event"]),
    "NUL in the template": ({"template": "{event}\x00"}, ["body", "template"]),
    "format spec in the template (a 1M-character prompt)": ({"template": "{event:>1000000}"}, ["body", "template"]),
    "attribute lookup in the template": ({"template": "{event.__class__.__mro__}"}, ["body", "template"]),
    "index lookup in the template": ({"template": "{concepts[0]}{event}"}, ["body", "template"]),
    "conversion in the template": ({"template": "{event!r}"}, ["body", "template"]),
    "positional placeholder in the template": ({"template": "{0}{event}"}, ["body", "template"]),
    "prompt longer than the model reads": ({"event": "😀" * 2000, "template": "😀" * 1990 + " {event}"}, ["body", "event"]),
    "a 'model' field": ({"model": "/etc/passwd"}, ["body", "model"]),
    "a 'checkpoint' field": ({"checkpoint": "../assets/petri-tiny"}, ["body", "checkpoint"]),
    "a 'store' field": ({"store": "/tmp"}, ["body", "store"]),
    "a 'path' field in settings": ({"settings": {"path": "/etc/passwd"}}, ["body", "settings", "path"]),
    "a 'file' field in an event": ({"event": None, "events": [{"event": "x", "file": "/etc/passwd"}]}, ["body", "events", 0, "file"]),
}


@pytest.mark.parametrize("case", list(FIELD_CASES))
def test_hostile_fields_are_refused_naming_the_field(client, case):
    changes, loc = FIELD_CASES[case]
    r = client.post("/api/seed", json=seed_body(**changes))
    TRIED["explicit field"] += 1
    assert r.status_code == 422, (case, r.status_code, r.text[:400])
    assert any(found[: len(loc)] == loc for found in locs(r)), (case, r.text[:400])


@pytest.mark.parametrize("changes", [
    {"event": "Арабский: مرحبا بالعالم — עברית — 😀🚀 — e\u0301 — \U0010fffd"},
    {"event": "‮reversed‬ text with a zero\u200bwidth space"},  # allowed in free text (never in labels)
    {"template": "{{event}} is literal; the event is {event}"},
], ids=["mixed scripts event", "bidi controls in an event", "literal braces"])
def test_unusual_but_valid_unicode_is_served(client, changes):
    r = client.post("/api/seed", json=seed_body(**changes))
    TRIED["valid unicode"] += 1
    assert r.status_code == 200, r.text[:300]
    assert r.json()["events"][0]["event"] == changes.get("event", EVENT)


@pytest.fixture(scope="module")
def wide_server(tmp_path_factory, live_server):
    """The API on a tiny random model with a 64-token canvas: room for concepts of many byte tokens."""
    from petri.engine.torch.tiny import tiny_random_model

    service = PetriService(tiny_random_model(canvas_length=64), RunStore(tmp_path_factory.mktemp("wide-store")))
    recorder = StatusRecorder(create_app(service, ui=False))
    with live_server(recorder) as live:
        yield live, service.lm.tokenizer
    assert not [code for code in recorder.statuses if code >= 500], dict(recorder.statuses)


@pytest.mark.parametrize("concepts,fit_16", [(["😀", "order"], True), (["日本", "שָׁלוֹם"], False),
                                             (["주문", "재고", "사람"], False)],
                         ids=["emoji", "CJK and Hebrew (with points)", "Korean"])
def test_non_latin_concepts_are_served_with_intact_anchors(wide_server, client, concepts, fit_16):
    """The tiny byte-level tokenizer spells each non-Latin character in 2-4 byte tokens: the emoji
    pair fits the module's 16-token canvas, the CJK + Hebrew and Korean sets do not (a 422
    layout_error there); all are served on a 64-token canvas. Every anchor holds the concept's own
    tokens and its text comes back unchanged in every sample's final text."""
    server, tokenizer = wide_server
    body = seed_body(concepts=concepts, samples=2, settings={"max_denoising_steps": 3})
    narrow = client.post("/api/seed", json=body)
    TRIED["valid unicode"] += 1
    if fit_16:
        assert narrow.status_code == 200, narrow.text[:300]
    else:
        assert narrow.status_code == 422 and narrow.json()["detail"][0]["type"] == "layout_error", narrow.text[:300]
    r = httpx.post(server.url + "/api/seed", json=body, timeout=REQUEST_TIMEOUT_S)
    TRIED["wide canvas unicode"] += 1
    assert r.status_code == 200, r.text[:300]
    for sample in r.json()["events"][0]["samples"]:
        assert sorted(a["concept"] for a in sample["anchors"]) == sorted(concepts)
        for a in sample["anchors"]:
            assert a["token_ids"] == tokenizer.encode(" " + a["concept"], add_special_tokens=False)  # mid-sentence form
            assert a["end"] - a["start"] == len(a["token_ids"]) and sample["flips"][a["start"]:a["end"]] == [0] * len(a["token_ids"])
            assert tokenizer.decode(a["token_ids"]) == " " + a["concept"] and " " + a["concept"] in sample["final_text"]


def test_oversized_bodies_are_refused_before_parsing(client, server):
    big = json.dumps(seed_body(event="x" * (5 * 1024 * 1024)))
    r = client.post("/api/seed", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and locs(r) == [["body"]], r.text[:300]
    assert f"{MAX_BODY_BYTES:,}" in r.json()["detail"][0]["msg"]

    def chunks():  # no Content-Length: streamed, refused as soon as it passes the limit
        yield b'{"concepts":["order","person"],"event":"'
        for _ in range(5 * 16):
            yield b"x" * 65536
        yield b'"}'

    r = client.post("/api/seed", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and locs(r) == [["body"]], r.text[:300]
    r = client.post("/api/study", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
    # a body just under the limit is read and judged on its fields
    r = client.post("/api/seed", content=json.dumps(seed_body(event="x" * (MAX_BODY_BYTES - 500))),
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and ["body", "event"] in locs(r)
    # the UI's upload endpoint has a limit too (Gradio's default has none)
    r = client.post("/gradio_api/upload", files={"files": ("big.json", b"x" * (5 * 1024 * 1024))})
    assert r.status_code == 413, r.text[:300]
    TRIED["oversized"] += 5
    assert client.get("/api/health").status_code == 200


STUDY_CASES = {
    "study not an object": ({"study": ["x"]}, ["body", "study"]),
    "unknown study key (a file name)": ({"study": {"study_file": "/etc/passwd"}}, ["body", "study", "top level"]),
    "a 'model' field": ({"study": {}, "model": "/etc/passwd"}, ["body", "model"]),
    "template with a format spec": ({"study": "TEMPLATE:{event:>99999}"}, ["body", "study"]),
    "control character in a study concept": ({"study": "CONCEPT:ord\x1ber"}, ["body", "study", "concepts"]),
    "event text too long": ({"study": "EVENT:" + "x" * 2001}, ["body", "study", "events", 0, "text"]),
    "unknown template id": ({"templates": ["../../etc"]}, ["body", "templates"]),
}


def a_study(kind: str | None = None) -> dict:
    study = {"id": "hostile", "title": "t", "language": "en", "concepts": ["order", "person"],
             "templates": [{"id": "t1", "text": "{event} {concepts}"}],
             "events": [{"id": "b1", "group": "benign", "text": "A lamp was ordered."},
                        {"id": "b2", "group": "benign", "text": "Two lamps were ordered."},
                        {"id": "c1", "group": "contradictory", "text": "90 in stock, 120 shipped."},
                        {"id": "c2", "group": "contradictory", "text": "0 in stock, 5 shipped."}]}
    if kind and kind.startswith("TEMPLATE:"):
        study["templates"][0]["text"] = kind.removeprefix("TEMPLATE:")
    elif kind and kind.startswith("CONCEPT:"):
        study["concepts"][0] = kind.removeprefix("CONCEPT:")
    elif kind and kind.startswith("EVENT:"):
        study["events"][0]["text"] = kind.removeprefix("EVENT:")
    return study


@pytest.mark.parametrize("case", list(STUDY_CASES))
def test_study_requests_are_checked_before_any_model_work(client, service, case):
    changes, loc = STUDY_CASES[case]
    body = {"study": a_study(), "samples": 1, "settings": {"max_denoising_steps": 2}, **changes}
    if isinstance(body["study"], str):
        body["study"] = a_study(body["study"])
    r = client.post("/api/study", json=body)
    TRIED["explicit study"] += 1
    assert r.status_code == 422, (case, r.status_code, r.text[:400])
    assert any(found[: len(loc)] == loc for found in locs(r)), (case, r.text[:400])
    assert not service.busy


PATHS = [
    "/api/runs/..", "/api/runs/%2e%2e", "/api/runs/%2e%2e%2f", "/api/runs/..%2F..%2Fpetri.sqlite",
    "/api/runs/%2Fetc%2Fpasswd", "/api/runs/..%5C..%5Cpetri.sqlite", "/api/runs/C:%5Cwindows",
    "/api/runs/%00", "/api/runs/deadbeef%00", "/api/runs/%ed%a0%80", "/api/runs/%EF%BC%8E%EF%BC%8E",
    "/api/runs/" + "a" * 65, "/api/runs/DEADBEEF", "/api/runs/petri.sqlite", "/api/runs/~root",
    "/api/runs/0123456789abcdef/..%2F..%2Fpetri.csv", "/api/runs/0123456789abcdef/%2e%2e.csv",
    "/api/runs/0123456789abcdef/positions%00.csv", "/api/runs/0123456789abcdef/..%5Cpairs.csv",
    "/api/runs?limit=100000000000000000000000000000", "/api/runs?limit=-1", "/api/runs?limit=abc",
    "/api/runs/0123456789abcdef?include_trajectories=maybe",
    "/gradio_api/file=/etc/passwd", "/gradio_api/file=../../../../etc/passwd", "/gradio_api/file=app.py",
    "/gradio_api/file=assets/petri-tiny/config.json", "/file=/etc/passwd", "/static/../../../etc/passwd",
]


@pytest.mark.parametrize("path", PATHS)
def test_path_like_ids_never_reach_a_file(client, path):
    r = client.get(path, follow_redirects=True)
    TRIED["paths"] += 1
    assert r.status_code in (403, 404, 422), (path, r.status_code, r.text[:300])
    assert "root:" not in r.text and "SQLite format" not in r.text and "model_type" not in r.text
    if path.startswith("/api/runs/") and "%2F" not in path.upper() and r.status_code == 404 and r.text.startswith("{"):
        detail = r.json()["detail"]
        assert detail == "Not Found" or detail.startswith(("run_id:", "table:")), detail
    if r.status_code == 422:
        assert locs(r)[0][0] in ("query", "path"), r.text


# ----------------------------------------------------------------------------------- nothing read or loaded

_AUDIT: dict = {"on": False, "events": []}


def _audit_hook(event: str, args: tuple) -> None:
    if _AUDIT["on"] and event in ("open", "os.listdir", "os.scandir", "sqlite3.connect", "shutil.copyfile", "os.remove"):
        _AUDIT["events"].append((event, str(args[0]) if args else ""))


sys.addaudithook(_audit_hook)  # audit hooks cannot be removed: it records only while _AUDIT["on"]


def test_requests_naming_files_or_models_never_open_or_load_them(client, server, monkeypatch, tmp_path):
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

    import petri.engine.select as select
    import petri.engine.torch.model as models

    secret_dir = tmp_path / "secret-target"
    secret_dir.mkdir()
    secret = secret_dir / "passwords.txt"
    secret.write_text("root:x:0:0")
    model_dir = secret_dir / "evil-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "diffusion_gemma"}')
    loads: list[str] = []

    def trap(name):
        def refuse(*args, **kwargs):
            loads.append(name)
            raise AssertionError(f"{name} called while serving a request")
        return refuse

    monkeypatch.setattr(models, "load_model", trap("load_model"))
    monkeypatch.setattr(select, "load_backend_model", trap("load_backend_model"))
    monkeypatch.setattr(DiffusionGemmaForBlockDiffusion, "from_pretrained", trap("from_pretrained"))
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", trap("tokenizer from_pretrained"))

    names = [str(secret), str(model_dir), os.path.relpath(secret), "file://" + str(secret)]
    requests = []
    for name in names:
        requests += [
            ("POST", "/api/seed", seed_body(model=name)),
            ("POST", "/api/seed", seed_body(settings={"model": name})),
            ("POST", "/api/seed", seed_body(event=name)),
            ("POST", "/api/seed", seed_body(concepts=["order", name[-60:]])),
            ("POST", "/api/seed", seed_body(template="{event} " + name)),
            ("POST", "/api/study", {"study": {**a_study(), "source": name}}),
            ("POST", "/api/study", {"study": a_study(), "model": name}),
            ("POST", "/api/study", {"study": {**a_study(), "events": [{"id": "e", "group": "g", "text": "x", "file": name}]}}),
            ("GET", "/api/runs/" + name.replace("/", "%2F"), None),
            ("GET", "/api/runs/0123456789abcdef/" + name.replace("/", "%2F") + ".csv", None),
            ("GET", "/gradio_api/file=" + name, None),
        ]
    statuses = Counter()
    _AUDIT["events"].clear()
    _AUDIT["on"] = True
    try:
        for method, path, body in requests:
            r = client.request(method, path, json=body)
            statuses[r.status_code] += 1
            assert r.status_code < 500, (path, body, r.text[:300])
            assert "root:x" not in r.text
    finally:
        _AUDIT["on"] = False
    TRIED["file/model names"] += len(requests)
    touched = [e for e in _AUDIT["events"] if "secret-target" in e[1] or "passwords" in e[1] or "evil-model" in e[1]]
    assert not touched, touched
    assert not loads, loads
    assert statuses[200] > 0, statuses  # some of them (a path as event text) ran, and still opened nothing


# ----------------------------------------------------------------------------------- loopback by default


def test_the_server_binds_to_loopback_by_default(monkeypatch, capsys):
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    assert app_module.build_parser().parse_args([]).host == "127.0.0.1"
    with pytest.raises(SystemExit) as stop:  # `python app.py --help`
        app_module.main(["--help"])
    assert stop.value.code == 0
    assert "default 127.0.0.1" in " ".join(capsys.readouterr().out.split())
    # a Space sets GRADIO_SERVER_NAME=0.0.0.0 on purpose; then the app warns that it is public
    from petri.core.config import PetriConfig

    assert app_module.build_parser(config=PetriConfig.from_env({"GRADIO_SERVER_NAME": "0.0.0.0"})).parse_args([]).host == "0.0.0.0"
    assert app_module.is_loopback("127.0.0.1") and app_module.is_loopback("::1") and app_module.is_loopback("localhost")
    assert not app_module.is_loopback("0.0.0.0") and not app_module.is_loopback("192.168.1.5")


@pytest.mark.parametrize("host,warned", [("0.0.0.0", True), ("192.168.1.5", True), ("::", True),
                                         ("127.0.0.1", False), ("localhost", False), ("::1", False)])
def test_the_app_warns_when_it_binds_beyond_loopback(monkeypatch, capsys, tmp_path, host, warned):
    """``python app.py --host H``: a non-loopback address prints the public-server warning on
    stderr before serving (and serves a public app); loopback prints none. (Model, app and server
    are stand-ins here.)"""
    import types

    service = types.SimpleNamespace(model_id="stand-in", model_info=lambda: {"model_id": "stand-in", "device": "cpu"})
    monkeypatch.delenv("PETRI_PUBLIC", raising=False)
    monkeypatch.delenv("PETRI_API_TOKEN", raising=False)
    monkeypatch.setattr(app_module, "build_service", lambda args: (service, None))
    monkeypatch.setattr(app_module, "create_app", lambda service, **kwargs: ("the app", kwargs["access"]))
    served = []
    monkeypatch.setattr(app_module, "serve", lambda app, service, host, port: served.append((app, host, port)))
    assert app_module.main(["--host", host, "--port", "7861", "--store", str(tmp_path)]) == 0
    ((app, access), served_host, served_port), = served
    assert (app, served_host, served_port) == ("the app", host, 7861)
    assert access.public is warned and access.api_token is None
    err = capsys.readouterr().err
    warning = (f"warning: serving on {host}, reachable from the network; jobs and runs are private to whoever "
               "submitted them (X-Petri-Token); set PETRI_API_TOKEN to require a token on every route")
    assert (warning in err) is warned, err
    assert ("warning" in err) is warned, err


def test_health_answers_while_requests_are_refused(client, server, service):
    """While another job holds the model, a burst of seeds is refused at once and health answers."""
    with model_held(service):
        codes = Counter(client.post("/api/seed", json=seed_body()).status_code for _ in range(20))
        TRIED["busy"] += 20
        assert codes == {503: 20}, codes
        assert client.get("/api/health").json()["busy"] is True
