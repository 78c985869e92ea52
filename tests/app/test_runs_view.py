"""Issue 48: the edges ask the service, never reach through it. No file of petri/web calls a method
of the service's run store or loaded model (``service.store.load_events``, ``service.lm.describe``;
27 places did), and the service's own reads answer what those calls answered."""

from __future__ import annotations

import re
from pathlib import Path

from petri.core.dish import Dish
from petri.core.plan import SeedEvent
from petri.core.trajectory import SamplerSettings

WEB = Path(__file__).resolve().parents[2] / "petri" / "web"
REACH_THROUGH = re.compile(r"service\.(store|lm)\.")


def test_no_edge_reaches_through_the_service():
    found = [f"{path.relative_to(WEB)}:{n}: {line.strip()}"
             for path in sorted(WEB.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if REACH_THROUGH.search(line)]
    assert found == []


def test_the_services_reads_answer_as_the_store_and_model(service, tiny_lm, tmp_path):
    settings = SamplerSettings(max_denoising_steps=2)
    mine = service.seed(service.plan([SeedEvent(Dish(("order", "person"), "x"), "calm")], 1, settings), owner="a")
    theirs = service.seed(service.plan([SeedEvent(Dish(("order", "person"), "y"))], 1, settings), owner="b")
    assert service.get_run(mine.run_id)["status"] == "done" and service.get_run("0" * 32) is None
    (key, group, traj), = service.load_events(mine.run_id)
    assert (key, group, traj.event) == ("event0", "calm", "x")
    # a local server lists every run (newest first); a public one the owner's only, none without one
    assert [r["run_id"] for r in service.runs_for(None, 10, public=False)] == [theirs.run_id, mine.run_id]
    assert [r["run_id"] for r in service.runs_for("a", 10, public=True)] == [mine.run_id]
    assert service.runs_for(None, 10, public=True) == []
    assert service.owns_run(mine.run_id, "a") and not service.owns_run(mine.run_id, "b")
    service.remove_run(theirs.run_id, None)
    assert service.get_run(theirs.run_id) is None
    assert service.model_info()["model_id"] == service.model_id == tiny_lm.model_id
    assert service.canvas_length == 16 and service.default_settings() == tiny_lm.default_settings()
    assert service.model_facts() == tiny_lm.facts() and service.model_facts().tier == "eager"
    assert service.store_path == str(tmp_path / "store" / "petri.sqlite")  # the store file (RunStore.path)
