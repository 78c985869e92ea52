"""The Runs tab's refresh (``listed``) leaves a visitor's pick alone while that run is still listed.

Found in CI: the tab's select event sends its inputs, the visitor clicks a row (the choice becomes
that run), and the refresh's answer landed afterwards and moved the choice to the newest run, so
Open opened another run. A refresh now sends no value for the choice while the run it was sent with
is listed, and picks the newest run only when that run is gone (or none was picked)."""

from __future__ import annotations

import httpx
import pytest
from test_public_access import gradio_call

from petri.app.service import PetriService, SeedEvent
from petri.core.dish import Dish
from petri.runs.store import RunStore
from petri.web.app import create_app
from petri.web.ui.runs import RUN_COLUMNS


@pytest.fixture(scope="module")
def local_ui(tiny_lm, tmp_path_factory, live_server):
    svc = PetriService(tiny_lm, RunStore(tmp_path_factory.mktemp("runs-refresh")))
    settings = svc.lm.default_settings()
    dish = Dish(("order", "person"), "The stock was counted.", "{event}", positions=(4, 12), shuffle=False)
    older = svc.seed(svc.plan([SeedEvent(dish)], 1, settings, seed=1)).run_id
    newer = svc.seed(svc.plan([SeedEvent(dish)], 1, settings, seed=2)).run_id
    with live_server(create_app(svc)) as live:
        yield live, older, newer
    svc.shutdown()


def choice_update(outputs: list) -> dict:
    """The refresh's second output: the update of the Run dropdown."""
    update = outputs[1]
    assert isinstance(update, dict) and "choices" in update, update
    return update


def test_a_refresh_keeps_a_listed_pick_and_replaces_a_gone_one(local_ui):
    live, older, newer = local_ui
    with httpx.Client(base_url=live.url, timeout=120) as http:
        kind, out = gradio_call(http, "listed", ["", "all", older])
        assert kind == "complete", out
        listed_ids = [row[RUN_COLUMNS.index("run_id")] for row in out[0]["data"]]
        assert listed_ids[:2] == [newer, older]  # newest first
        update = choice_update(out)
        assert "value" not in update, update  # the older run stays picked
        assert {c[1] for c in update["choices"]} >= {older, newer}

        for gone in ("0" * 32, None):
            kind, out = gradio_call(http, "listed", ["", "all", gone])
            assert kind == "complete", out
            assert choice_update(out).get("value") == newer
