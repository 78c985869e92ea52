"""The Study tab on a paired (within-event) study: the tab keeps the study's conditions through its
tables, runs every condition, and shows one line per event (the slope chart) with the paired
statistics as the headline."""

from __future__ import annotations

import plotly.graph_objects as go

from petri.study.schema import study_from_dict
from petri.web.ui.study_tab.study import StudyController, fields_to_study, study_to_fields
from tests.web.api.test_paired_api import STUDY


def test_the_tab_keeps_a_paired_studys_conditions_through_its_tables():
    study = study_from_dict(STUDY)
    meta, concepts, events, templates, comparison, show, ids = study_to_fields(study)
    again = fields_to_study(meta, concepts, events, templates, comparison, show)
    assert again.conditions == study.conditions and again.content_hash() == study.content_hash()
    renamed = events.copy()
    renamed.loc[1, "id"] = "e09"  # a renamed event runs with its own text and concepts under every condition
    edited = fields_to_study(meta, concepts, renamed, templates, comparison, show)
    assert edited.events[1].variants == () and edited.events[0].variants == study.events[0].variants


def test_the_study_tab_runs_a_paired_study_and_draws_one_line_per_event(service):
    study = study_from_dict(STUDY)
    meta, concepts, events, templates, comparison, show, _ = study_to_fields(study)
    *live, final = StudyController(service).run(meta, concepts, events, templates, comparison, show, ["t1"], 2, 0, 3)
    assert "of 4 batches" in final["status"]  # 2 events x 1 template x 2 conditions
    fig = final["instability"]
    assert isinstance(fig, go.Figure)
    assert sorted(t.name for t in fig.data if t.name in ("e01", "e02")) == ["e01", "e02"]
    assert "Wilcoxon" in fig.layout.title.text and list(fig.data[0].x) == ["fitting", "unrelated"]
    stats = final["stats"]
    assert "**Paired design:** every event ran under 2 conditions" in stats and "unrelated vs fitting" in stats
    assert "Power:" in stats and "Headline (event level" not in stats
    names = {p.rsplit("/", 1)[-1] for p in final["files"]["value"]}
    assert {"paired_summary.csv", "paired_event_means.csv", "samples.csv"} <= names
    assert not service.busy
