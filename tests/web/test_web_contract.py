"""The web layer's contract: the OpenAPI routes and request fields a client relies on (written out
here, so a refactor cannot drop one silently), the layering of petri/web (routes and UI never import
each other; no import circle), and the UI going through the API's own checks."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

from petri.web.api.requests import SeedRequest, StudyRequest, prepare_seed, prepare_study
from petri.web.app import create_app
from petri.web.errors import FieldError
from petri.web.ui.dish_tab.dish import DishController
from petri.web.ui.study_tab.study import StudyController
from service_support import model_held

WEB = Path(__file__).resolve().parents[2] / "petri" / "web"

#: Every documented route: path → {method: operationId}.
ROUTES = {
    "/api/health": {"get": "health_api_health_get"},
    "/api/runs": {"get": "list_runs_api_runs_get"},
    "/api/runs/{run_id}": {"get": "get_run_api_runs__run_id__get"},
    "/api/runs/{run_id}/{table}.{fmt}": {"get": "get_table_api_runs__run_id___table___fmt__get"},
    "/api/seed": {"post": "seed_api_seed_post"},
    "/api/study": {"post": "study_api_study_post"},
}
#: Every request model's fields (and the required ones), as the OpenAPI schema shows them.
REQUEST_FIELDS = {
    "SeedRequest": ({"concepts", "event", "events", "group", "include_trajectories", "positions", "samples", "seed",
                     "settings", "shuffle", "template"}, {"concepts"}),
    "StudyRequest": ({"samples", "seed", "settings", "study", "templates"}, {"study"}),
    "EventIn": ({"event", "group"}, {"event"}),
    "SettingsIn": ({"adaptive_stop", "confidence_threshold", "entropy_bound", "max_denoising_steps",
                    "pin_thought_channel", "stability_threshold", "t_max", "t_min"}, set()),
}
RESPONSE_MODELS = {"AnchorOut", "EventOut", "HealthOut", "ModelOut", "PairOut", "PreservationOut", "RunOut",
                   "SampleOut", "SegmentOut", "StudyOut"}


# --------------------------------------------------------------------------------- OpenAPI


def test_openapi_keeps_every_route_and_request_field(service):
    schema = create_app(service, ui=False).openapi()
    for path, methods in ROUTES.items():
        assert path in schema["paths"], path
        for method, operation_id in methods.items():
            assert schema["paths"][path][method]["operationId"] == operation_id
    components = schema["components"]["schemas"]
    for name, (fields, required) in REQUEST_FIELDS.items():
        model = components[name]
        assert fields <= set(model["properties"]), (name, fields - set(model["properties"]))
        assert set(model.get("required", [])) == required, name
        assert model["additionalProperties"] is False, name  # unknown fields stay refused
    assert RESPONSE_MODELS <= set(components)
    seed_body = schema["paths"]["/api/seed"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    study_body = schema["paths"]["/api/study"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert seed_body["$ref"].endswith("/SeedRequest") and study_body["$ref"].endswith("/StudyRequest")


# --------------------------------------------------------------------------------- layering


def _is_module(dotted: str) -> bool:
    path = WEB.parent.parent / Path(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _web_imports(path: Path) -> set[str]:
    """The petri.web modules a file imports (``petri.web.x.y`` and ``from petri.web.x import y``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("petri.web"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if _is_module(name) else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("petri.web.")}
    return found


def web_modules() -> dict[str, Path]:
    """Every module of petri/web by its dotted name (packages by their folder's name)."""
    modules = {}
    for path in sorted(WEB.rglob("*.py")):
        parts = path.relative_to(WEB).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if parts:
            modules[".".join(("petri", "web", *parts))] = path
    return modules


def test_routes_and_ui_never_import_each_other_and_nothing_circles():
    """The UI (petri/web/ui) never imports the routers (petri/web/api's routes, jobs and replay) nor the
    app; nothing but the app imports the UI. The request and response models are shared."""
    graph = {name: _web_imports(path) for name, path in web_modules().items()}
    assert "petri.web.ui.dish_tab.dish" in graph and "petri.web.api.routes" in graph
    ui = {m for m in graph if m.startswith("petri.web.ui.")}
    api_side = {"petri.web.api.routes", "petri.web.api.jobs", "petri.web.api.replay", "petri.web.app"}
    for module in ui:
        assert not graph[module] & api_side, (module, graph[module] & api_side)
    for module in set(graph) - ui - {"petri.web.app", "petri.web.ui"}:  # only the app mounts the UI
        assert not graph[module] & (ui | {"petri.web.ui"}), (module, graph[module] & ui)

    def reaches(start: str, target: str, seen: set) -> bool:
        return any(n == target or (n not in seen and not seen.add(n) and reaches(n, target, seen))
                   for n in graph.get(start, ()))

    for module in graph:
        assert not reaches(module, module, set()), f"{module} imports itself through a circle"
    for gone in ("petri.api", "petri.ui", "petri.ui_study"):
        assert importlib.util.find_spec(gone) is None, gone


# --------------------------------------------------------------------------------- the UI runs the API's checks


def study_data(events: list[dict], templates: int = 1) -> dict:
    return {"schema": 1, "id": "x", "title": "x", "language": "en", "concepts": ["order", "person"],
            "templates": [{"id": f"t{i}", "text": "{event}"} for i in range(templates)], "events": events,
            "comparison": {"groups": ["benign", "contradictory"]}}


def study_tab_error(service, data: dict, monkeypatch) -> str:
    """The Study tab's refusal of ``data`` (as edited tables), which must come before any model work:
    the model is held meanwhile and submitting a job fails the test at once, so a request that got
    past the checks ends in an AssertionError instead of the tab's gr.Error."""

    def no_job(*args, **kwargs):
        raise AssertionError("the Study tab submitted a job that the API's checks refuse")

    monkeypatch.setattr(service, "submit_study", no_job)
    events = pd.DataFrame([[e["id"], e["group"], e["text"], ""] for e in data["events"]],
                          columns=["id", "group", "text", "concepts"])
    templates = pd.DataFrame([[t["id"], t["text"]] for t in data["templates"]], columns=["id", "text"])
    ids = [t["id"] for t in data["templates"]]
    with model_held(service), pytest.raises(gr.Error) as info:
        list(StudyController(service).run({"id": "x", "title": "x", "language": "en"}, "order, person", events,
                                          templates, "benign, contradictory", "", ids, 2, 0, 3))
    assert service.store.list_runs(10) == []  # refused before the model was asked
    return info.value.message


def api_error(service, data: dict) -> FieldError:
    with pytest.raises(FieldError) as info:
        prepare_study(StudyRequest(study=data, templates=[t["id"] for t in data["templates"]]), service.lm)
    return info.value


def test_study_tab_refuses_a_prompt_too_long_for_the_model_like_the_api(service, monkeypatch):
    # 2,000 emoji are 8,000 tokens of the tiny BPE vocabulary: more than its 2,048 positions
    events = [{"id": "b1", "group": "benign", "text": "The order was packed."},
              {"id": "b2", "group": "benign", "text": "The stock was counted."},
              {"id": "c1", "group": "contradictory", "text": "\U0001F600" * 2000},
              {"id": "c2", "group": "contradictory", "text": "None in stock."}]
    err = api_error(service, study_data(events))
    assert err.kind == "prompt_too_long" and err.loc == ["body", "study", "events", 2, "text"]
    message = study_tab_error(service, study_data(events), monkeypatch)
    assert message.startswith("study.events.2.text:") and "more than the 2,048 positions" in message


def test_study_tab_refuses_more_batches_than_the_api(service, monkeypatch):
    events = [{"id": f"e{i}", "group": ("benign", "contradictory")[i % 2], "text": f"event {i}"} for i in range(31)]
    data = study_data(events, templates=20)  # 31 × 20 = 620 batches > 600
    err = api_error(service, data)
    assert err.loc == ["body", "study", "events"] and err.msg.startswith("620 (event, template) batches; at most 600")
    assert study_tab_error(service, data, monkeypatch) == f"study.events: {err.msg}"


def test_dish_preview_refuses_what_the_seed_request_refuses(service):
    ctl = DishController(service)
    request = SeedRequest(concepts=["order", "inventory", "person"], event="x", positions=[3, 3, 9], shuffle=False)
    with pytest.raises(FieldError) as info:
        prepare_seed(request, service.lm)
    placement = pd.DataFrame({"concept": ["order", "inventory", "person"], "start": [3, 3, 9], "tokens": [1, 1, 1]})
    shown = ctl.canvas(placement)["error"]  # the canvas control's refusal line
    assert info.value.kind == "layout_error" and info.value.msg in shown
    accepted = pd.DataFrame({"concept": ["order", "inventory", "person"], "start": [3, 6, 9], "tokens": [1, 1, 1]})
    prepare_seed(SeedRequest(concepts=["order", "inventory", "person"], event="x", positions=[3, 6, 9]), service.lm)
    assert ctl.canvas(accepted)["error"] == ""
