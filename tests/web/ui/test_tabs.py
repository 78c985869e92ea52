"""The UI's tabs come from one list (petri.web.ui.build.RESULT_TABS), and the Runs tab reopens a run in
the tab of its kind through one mapping (petri.web.ui.runs.REOPEN): nothing else names the tabs."""

from __future__ import annotations

from petri.app.service import SeedEvent
from petri.core.dish import Dish
from petri.core.trajectory import SamplerSettings
from petri.web.ui.build import RESULT_TABS, build_ui
from petri.web.ui.runs import KIND_FILTERS, REOPEN, RunsController


def tab_labels(blocks) -> list[str]:
    config = blocks.get_config_file()
    return [c["props"]["label"] for c in config["components"] if c.get("type") == "tabitem"]


def test_the_page_shows_the_result_tabs_in_their_order_then_runs_and_model(service):
    blocks = build_ui(service)
    assert tab_labels(blocks) == ["Dish", "Compare", "Study", "Probe", "Runs", "Model"]
    assert [t.label for t in RESULT_TABS] == ["Dish", "Compare", "Study", "Probe"]


def test_every_result_tab_reopens_its_kind_and_the_filter_offers_it():
    assert [t.kind for t in RESULT_TABS] == list(REOPEN) == KIND_FILTERS[1:]


def test_a_run_reopens_through_the_mapping_of_its_kind(service):
    """A stored dish run goes to the ``dish`` entry with that tab's controller; no other entry runs."""
    dish = Dish(("order", "person"), "The order shipped.", "{event}", positions=(2, 9))
    result = service.seed(service.plan([SeedEvent(dish)], 1, SamplerSettings(max_denoising_steps=3), seed=3))
    seen = []

    def reopen(ctl, svc, run, caller):
        seen.append((ctl, svc, run["run_id"]))
        return {"status": "x"}

    def never(*args):
        raise AssertionError("the wrong kind's reopen ran")

    runs = RunsController(service, {"dish": "the dish controller"}, {"dish": reopen, "compare": never, "study": never})
    kind, note, views = runs.open(result.run_id)
    assert (kind, views) == ("dish", {"status": "x"}) and result.run_id in note
    assert seen == [("the dish controller", service, result.run_id)]


def open_handler_of(blocks):
    """The Runs tab's Open handler and the status line it writes to (from the built Blocks)."""
    (fn,) = [f for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "open_handler"]
    note = next(c for c in fn.outputs if getattr(c, "elem_id", None) == "petri-runs-status")
    return fn.fn, note


def test_a_run_that_cannot_open_says_so_once_and_marks_nothing_else(tiny_lm, service):
    """An unknown id and a run that stopped before its first event each give one message in the Runs
    tab; the handler returns nothing for any other component (a raised error would mark them all)."""
    handler, note = open_handler_of(build_ui(service))
    unknown = handler(None, "0123456789abcdef")
    assert list(unknown) == [note] and unknown[note].startswith("**Cannot open:**") and "0123456789abcdef" in unknown[note]
    service.store.create_run("fedcba9876543210", "seed", tiny_lm.model_id, {"events": [{"event": "x"}]})
    service.store.finish_run("fedcba9876543210", status="cancelled")
    empty = handler(None, "fedcba9876543210")
    assert list(empty) == [note] and "(cancelled) stopped before its first event finished" in empty[note]


def test_a_stored_run_opens_and_clears_the_status_line(service):
    dish = Dish(("order", "person"), "The order shipped.", "{event}", positions=(2, 9))
    run_id = service.seed(service.plan([SeedEvent(dish)], 1, SamplerSettings(max_denoising_steps=3), seed=3)).run_id
    handler, note = open_handler_of(build_ui(service))
    updates = handler(None, run_id)
    assert updates[note] == "" and len(updates) > 3
