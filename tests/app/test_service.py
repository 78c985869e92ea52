"""The service runs one model job at a time and stores what it ran."""

from __future__ import annotations

import pytest

from petri.app.service import BusyError, SeedEvent
from petri.core.dish import Dish
from petri.core.trajectory import SamplerSettings
from service_support import model_held


def test_seed_stores_every_event(service):
    events = [SeedEvent(Dish(("order", "person"), "ok"), "benign"), SeedEvent(Dish(("order", "person"), "bad"), "contradictory")]
    result = service.seed(service.plan(events, 2, SamplerSettings(max_denoising_steps=3), seed=1))
    stored = service.store.load_events(result.run_id)
    assert [(k, g) for k, g, _ in stored] == [("event0", "benign"), ("event1", "contradictory")]
    assert [t.event for t in result.trajectories] == ["ok", "bad"]
    assert service.store.get_run(result.run_id)["status"] == "done"


def test_second_job_gets_busy(service):
    with model_held(service):
        assert service.busy
        with pytest.raises(BusyError, match="already running"):
            service.seed(service.plan([SeedEvent(Dish(("order",), "x"))], 1, SamplerSettings(max_denoising_steps=2)))
    assert not service.busy
