"""On a public server every path that reaches stored data answers only to the run's owner: the
HTTP routes, the Gradio event handlers a hostile client can call directly
(``/gradio_api/call/<handler>`` with any run id) and the files Gradio serves
(``/gradio_api/file=…``). Three clients: an API caller A, two browser visitors V1 and V2 (each
with the cookie the page set), and a client with no token at all."""

from __future__ import annotations

import json
from contextlib import contextmanager

import httpx
import pytest

from petri.app.service import PetriService
from petri.runs.store import RunStore
from petri.web.access import CALLER_COOKIE, AccessPolicy, Caller, owner_of
from petri.web.app import create_app
from petri.web.ui.runs import RUN_COLUMNS

EVENT = "Only 90 units are in stock, but a customer ordered 120."


def seed_body(**changes) -> dict:
    body = {"concepts": ["order", "inventory", "person"], "event": EVENT, "samples": 2,
            "settings": {"max_denoising_steps": 3}, "seed": 1}
    return {**body, **changes}


def gradio_call(http: httpx.Client, name: str, data: list, session: str | None = None) -> tuple[str, object]:
    """Call Gradio handler ``name`` as a hostile client would: ("complete", outputs) or ("error", message).
    ``session``: a Gradio session hash, so that a later call sees the State an earlier one set."""
    posted = http.post(f"/gradio_api/call/{name}", json={"data": data, **({"session_hash": session} if session else {})})
    assert posted.status_code == 200, posted.text
    event_id = posted.json()["event_id"]
    kind, payload = None, None
    with http.stream("GET", f"/gradio_api/call/{name}/{event_id}") as stream:
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind in ("complete", "error"):
                return kind, json.loads(line[6:])
    return kind or "none", payload


def file_urls(outputs) -> list[str]:
    """Every ``/gradio_api/file=`` url in a handler's outputs."""
    found = []

    def walk(value):
        if isinstance(value, dict):
            if isinstance(value.get("url"), str) and "file=" in value["url"]:
                found.append(value["url"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(outputs)
    return found


def forget_cookies(request: httpx.Request) -> None:
    """A client that never sends a cookie (the page sets one on every response it can)."""
    request.headers.pop("cookie", None)


@pytest.fixture(scope="module")
def public_ui(tiny_lm, tmp_path_factory, live_server):
    svc = PetriService(tiny_lm, RunStore(tmp_path_factory.mktemp("public-ui")))
    with live_server(create_app(svc, access=AccessPolicy(public=True))) as live:
        yield live, svc
    svc.shutdown()


@contextmanager
def visitor(url: str):
    """A browser: it loads the page first, which sets its caller cookie."""
    with httpx.Client(base_url=url, timeout=120) as http:
        page = http.get("/")
        assert page.status_code == 200 and CALLER_COOKIE in page.headers.get("set-cookie", "")
        assert "httponly" in page.headers["set-cookie"].lower()
        yield http


def test_a_public_server_keeps_each_callers_runs_private_on_every_path(public_ui):
    live, service = public_ui
    with httpx.Client(base_url=live.url, timeout=120) as api, visitor(live.url) as v1, visitor(live.url) as v2, \
            httpx.Client(base_url=live.url, timeout=120, event_hooks={"request": [forget_cookies]}) as nobody:
        assert v1.cookies[CALLER_COOKIE] != v2.cookies[CALLER_COOKIE]
        posted = api.post("/api/seed", json=seed_body())
        assert posted.status_code == 200, posted.text
        a_token, a_run = posted.headers["x-petri-token"], posted.json()["run_id"]
        a = {"X-Petri-Token": a_token}
        v1_run = v1.post("/api/seed", json=seed_body(seed=2)).json()["run_id"]  # the cookie is V1's token
        assert service.store.owns_run(v1_run, owner_of(v1.cookies[CALLER_COOKIE]))

        # the Runs list: each sees its own, nobody sees anything
        for who, mine in ((v1, {v1_run}), (v2, set()), (nobody, set())):
            kind, out = gradio_call(who, "listed", ["", "all", None])
            assert kind == "complete", out
            assert {row[RUN_COLUMNS.index("run_id")] for row in out[0]["data"]} == mine
            assert not {a_run, v1_run} - mine & set(json.dumps(out).split('"'))
        # Open: the owner reopens with its downloads; anyone else reads "no stored run"
        kind, out = gradio_call(v1, "open_handler", [v1_run])
        assert kind == "complete", out
        urls = file_urls(out)
        assert any(u.endswith("positions.csv") for u in urls), urls
        for who, run in ((v2, v1_run), (nobody, v1_run), (v1, a_run), (v2, a_run), (nobody, a_run)):
            kind, out = gradio_call(who, "open_handler", [run])  # one message, nothing else (issue 49)
            assert kind == "complete" and EVENT not in json.dumps(out) and not file_urls(out), out
            assert f"**Cannot open:** run_id: no stored run '{run}'" in out, out
        # the files Gradio serves: only to their owner
        positions = next(u for u in urls if u.endswith("positions.csv"))
        path = positions[positions.index("/gradio_api/file="):]
        assert v1.get(path).status_code == 200 and "order" in v1.get(path).text
        for who in (v2, nobody):
            assert who.get(path).status_code == 404
            assert who.get(path.replace("/gradio_api/file=", "/file=")).status_code in (404, 405)
        # the HTTP API agrees
        assert api.get(f"/api/runs/{v1_run}", headers=a).status_code == 404
        assert v2.get(f"/api/runs/{v1_run}").status_code == 404
        assert v1.get(f"/api/runs/{v1_run}/positions.csv").status_code == 200
        assert nobody.get("/api/runs").status_code == 401 and nobody.get("/api/jobs").status_code == 401
        assert {r["run_id"] for r in v2.get("/api/runs").json()} == set()
        # Delete: another caller's run is not there; one's own goes
        kind, out = gradio_call(v2, "deleted", [v1_run, "", "all"], "v2-delete")
        assert kind == "complete" and f"**Cannot delete:** run_id: no stored run '{v1_run}'" in out, out
        kind, out = gradio_call(v2, "deleted", [v1_run, "", "all"], "v2-delete")  # asking twice changes nothing
        assert service.store.get_run(v1_run) is not None and EVENT not in json.dumps(out)
        # Delete asks first (issue 49): the first press names the run, the second on it removes it
        kind, out = gradio_call(v1, "deleted", [v1_run, "", "all"], "v1-delete")
        assert kind == "complete" and "press **Delete** again" in out[0], out
        assert service.store.get_run(v1_run) is not None
        kind, out = gradio_call(v1, "deleted", [v1_run, "", "all"], "v1-delete")
        assert kind == "complete" and out[0] == f"Deleted run `{v1_run}`.", out
        assert service.store.get_run(v1_run) is None and service.store.get_run(a_run) is not None


def test_the_trajectory_downloads_lie_in_the_callers_folder_and_answer_only_to_it(public_ui):
    """Issue 19's rule on the trajectory viewer's "Prepare downloads": V1 reopens its run and prepares
    the replay files; they are written in V1's own download folder (not a shared temp folder that
    Gradio serves to anyone with the URL), V2 and a client with no token get 404 for each, and V2's
    own session has nothing to export."""
    from petri.web.ui.access import export_dir

    live, service = public_ui
    with visitor(live.url) as v1, visitor(live.url) as v2, \
            httpx.Client(base_url=live.url, timeout=120, event_hooks={"request": [forget_cookies]}) as nobody:
        run = v1.post("/api/seed", json=seed_body(seed=5)).json()["run_id"]
        kind, out = gradio_call(v1, "open_handler", [run], session="v1-session-replay")
        assert kind == "complete", out
        kind, out = gradio_call(v1, "traj_export", [0], session="v1-session-replay")
        assert kind == "complete", out
        urls = file_urls(out)
        assert {u.rsplit(".", 1)[-1] for u in urls} >= {"gif", "html", "csv", "parquet"}, urls
        mine = export_dir(Caller(public=True, token=v1.cookies[CALLER_COOKIE]))
        theirs = export_dir(Caller(public=True, token=v2.cookies[CALLER_COOKIE]))
        for url in urls:
            path = url[url.index("/gradio_api/file=") + len("/gradio_api/file="):]
            assert __import__("pathlib").Path(path).resolve().is_relative_to(mine.resolve()), (path, mine)
            route = url[url.index("/gradio_api/file="):]
            assert v1.get(route).status_code == 200, route
            for who in (v2, nobody):
                assert who.get(route).status_code == 404, route
        assert not any(theirs.iterdir())
        kind, out = gradio_call(v2, "traj_export", [0], session="v2-session-replay")
        assert kind == "error", out


def test_the_trajectory_view_opens_no_other_callers_run(tiny_lm, service):
    """Defence in depth: the viewer's handlers open the run through UiAccess.open_run, so a key
    naming another caller's run (however it got into a session) reads as no stored run."""
    import gradio as gr

    from petri.app.service import SeedEvent
    from petri.core.dish import Dish
    from petri.web.tokens import TokenText
    from petri.web.ui.widgets.trajectory import TrajectoryView

    a, b = Caller(public=True, token="a" * 43), Caller(public=True, token="b" * 43)
    run_id = service.seed(service.plan([SeedEvent(Dish(concepts=["order", "inventory"], event=EVENT))], 2), owner=a.owner).run_id
    view, key = TrajectoryView(service, TokenText(tiny_lm.tokenizer)), {"run_id": run_id, "event": 0, "title": ""}
    assert view.export(key, 0, a)
    for call in (lambda: view.export(key, 0, b), lambda: view.show_sample(key, 1, b)):
        with pytest.raises(gr.Error, match="no stored run"):
            call()


def test_a_public_page_lists_no_run_before_a_visitor_asks(live_server, service):
    """The Runs table's first value is in the page every visitor gets: on a public server it is
    empty, even for a store that already holds someone's run when the server starts."""
    from fastapi.testclient import TestClient

    with TestClient(create_app(service, ui=False, access=AccessPolicy(public=True))) as api:
        run = api.post("/api/seed", json=seed_body(event="A secret event nobody else should read.")).json()["run_id"]
    with live_server(create_app(service, access=AccessPolicy(public=True))) as live, \
            httpx.Client(base_url=live.url, timeout=120) as visitor:
        pages = [visitor.get(path) for path in ("/", "/config", "/gradio_api/info")]
        assert all(r.status_code == 200 for r in pages), [r.status_code for r in pages]
        assert '"petri-runs-table"' in pages[1].text  # the table is in the config, empty
        assert all(run not in r.text and "secret event" not in r.text for r in pages)


def ui_compare_run(svc: PetriService, caller: Caller, labels: tuple[str, str] = ("A", "B")):
    """A 2-sample, 3-step Compare run from the UI's controller (EVENT as A, "The order shipped." as
    B) made by ``caller``: ``(controller, run id)``."""
    from petri.web.ui.compare import CompareController
    from petri.web.ui.dish_tab.dish import DishController

    ctl = CompareController(svc, DishController(svc))
    updates = list(ctl.run("order, inventory, person", labels[0], EVENT, labels[1], "The order shipped.", None, 2, 0, 3,
                           caller=caller))
    return ctl, updates[-1]["run_id"]


def test_ui_runs_belong_to_the_visitor_who_ran_them(service):
    """A Compare run from the UI is stored as its caller's (so its Runs tab lists it, and no one else's)."""
    caller = Caller(public=True, token="v" * 43)
    _, run_id = ui_compare_run(service, caller)
    assert service.store.owns_run(run_id, caller.owner)
    assert not service.store.owns_run(run_id, owner_of("w" * 43))


# ------------------------------------------------------------------------------ caller tokens
@pytest.mark.parametrize("token", ["A" * 200 + "-alice-secret", "a", "", "A" * 129, "A" * 30 + " x", "Ä" * 30])
def test_a_malformed_caller_token_is_refused_naming_the_header_never_cut(token, service):
    app = create_app(service, ui=False, access=AccessPolicy(public=True))
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        for method, path in (("POST", "/api/jobs/seed"), ("GET", "/api/jobs"), ("GET", "/api/runs"),
                             ("POST", "/api/seed")):
            r = client.request(method, path, json=seed_body(), headers={"X-Petri-Token": token.encode("utf-8")})
            assert r.status_code == 400, (path, r.text)
            assert "X-Petri-Token" in r.json()["detail"]
            assert token.encode()[:60].decode("utf-8", "ignore") not in r.text or len(token) < 2


def test_two_long_tokens_that_share_a_prefix_stay_two_callers(service):
    from fastapi.testclient import TestClient

    app = create_app(service, ui=False, access=AccessPolicy(public=True))
    alice, mallory = "A" * 100 + "-alice", "A" * 100 + "-mallory"
    with TestClient(app) as client:
        job = client.post("/api/jobs/seed", json=seed_body(), headers={"X-Petri-Token": alice})
        assert job.status_code == 202 and job.headers["x-petri-token"] == alice
        assert client.get(f"/api/jobs/{job.json()['job_id']}", headers={"X-Petri-Token": mallory}).status_code == 404
        assert client.get("/api/jobs", headers={"X-Petri-Token": mallory}).json()["jobs"] == []
        issued = {client.post("/api/jobs/seed", json=seed_body(seed=s)).json()["token"] for s in (2, 3)}
        assert len(issued) == 2 and all(len(t) >= 43 for t in issued)  # 256 random bits, base64url


def test_the_api_token_never_reaches_the_access_log_and_a_post_keeps_it_out_of_the_query(service):
    """``/?api_token=SECRET`` opens the UI without the secret landing in uvicorn's access log, and a
    POST that carries it in the query is refused clearly (a 303 would drop its body)."""
    import logging
    import threading
    import time

    import uvicorn

    from petri.web.server import server_config

    secret = "s3cret-token-value-123"
    app = create_app(service, ui=False, access=AccessPolicy(api_token=secret))
    config = server_config(app, "127.0.0.1", 0)
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(self.format(record))

    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        logging.getLogger("uvicorn.access").addHandler(keep := Keep())
        port = server.servers[0].sockets[0].getsockname()[1]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            opened = http.get(f"/?api_token={secret}", follow_redirects=False)
            assert opened.status_code == 303
            posted = http.post(f"/api/seed?api_token={secret}", json=seed_body())
            assert posted.status_code == 400 and "api_token" in posted.json()["detail"]
        time.sleep(0.2)
        logging.getLogger("uvicorn.access").removeHandler(keep)
    finally:
        server.should_exit = True
        thread.join(10)
        service.shutdown()
    assert any("api_token=***" in line for line in lines), lines
    assert not any(secret in line for line in lines), lines


# ------------------------------------------------------------------------------ strict bodies
@pytest.fixture(scope="module")
def api(tiny_lm, tmp_path_factory):
    from fastapi.testclient import TestClient

    svc = PetriService(tiny_lm, RunStore(tmp_path_factory.mktemp("strict")))
    with TestClient(create_app(svc, ui=False)) as client:
        yield client
    svc.shutdown()


def test_t_min_above_t_max_is_refused_naming_the_field(api):
    r = api.post("/api/seed", json=seed_body(settings={"t_min": 10, "t_max": 0.01, "max_denoising_steps": 2}))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "settings", "t_min"], r.text
    assert "t_min" in r.json()["detail"][0]["msg"] and "t_max" in r.json()["detail"][0]["msg"]
    r = api.post("/api/jobs/seed", json=seed_body(settings={"t_max": 0.3}))  # below the model's default t_min
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "settings", "t_max"], r.text
    assert api.post("/api/seed", json=seed_body(settings={"t_min": 0.5, "t_max": 0.5, "max_denoising_steps": 2})).status_code == 200


@pytest.mark.parametrize("body,says", [
    (json.dumps(seed_body()).encode("utf-16"), "UTF-8"),
    (json.dumps(seed_body()).encode("utf-16-le"), "UTF-8"),
    (b"\xef\xbb\xbf" + json.dumps(seed_body()).encode(), "UTF-8"),
    (b'{"samples": 2, ' + json.dumps(seed_body())[1:].encode(), "'samples' twice"),
    (json.dumps(seed_body()).replace('"settings": {', '"settings": {"t_min": 0.5, "t_min": 0.6, ').encode(), "'t_min' twice"),
])
def test_a_body_in_utf16_or_with_a_duplicate_key_is_refused_saying_so(api, body, says):
    r = api.post("/api/seed", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert says in json.dumps(r.json()), r.text


@pytest.mark.parametrize("version", [True, 1.0, "1", 2])
def test_only_the_integer_1_is_a_schema_version(version):
    from petri.study.schema import StudyError, study_from_dict

    study = json.loads((__import__("petri.core.paths", fromlist=["x"]).studies_dir() / "inventory_order.json").read_text())
    study_from_dict({**study, "schema": 1})
    with pytest.raises(StudyError, match="schema"):
        study_from_dict({**study, "schema": version})


def test_deleting_a_shared_run_removes_only_the_callers_claim_until_the_last(service):
    """Two callers who posted the same study share its run: the first delete drops only that
    caller's claim; the last drops the run, its events and its claims."""
    from petri.app.service import SeedEvent
    from petri.core.dish import Dish

    a, b = owner_of("a" * 43), owner_of("b" * 43)
    run_id = service.seed(service.plan([SeedEvent(Dish(concepts=["order", "inventory"], event=EVENT))], 2), owner=a).run_id
    service.store.add_run_owner(run_id, b)
    assert service.store.remove_run(run_id, a) is True
    assert service.store.get_run(run_id) is not None and not service.store.owns_run(run_id, a) and service.store.owns_run(run_id, b)
    assert service.store.load_events(run_id)
    assert service.store.remove_run(run_id, b) is True
    assert service.store.get_run(run_id) is None and service.store.load_events(run_id) == [] and not service.store.owns_run(run_id, b)
    assert service.store.remove_run(run_id, b) is False
