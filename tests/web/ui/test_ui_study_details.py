"""Issue 60 item 10 in the Study tab (no browser): a one-template run's template sensitivity is a
sentence, not a 1 x 1 heatmap; counts are written with their right plural; an uploaded or reopened
study empties the Bundled-study box, which named inventory_order.json over another study."""

from __future__ import annotations

import json

import pandas as pd

from petri.core.wording import counted, plural
from petri.web.ui.study_tab.study import StudyController, jaccard_views, pending_views
from study_support import study_fields, tab_study


def test_counts_are_written_with_their_plural():
    assert [counted(n, "template") for n in (0, 1, 2)] == ["0 templates", "1 template", "2 templates"]
    assert counted(1, "batch") == "1 batch" and counted(3, "batch") == "3 batches"
    assert counted(1, "shuffled sample") == "1 shuffled sample" and plural("other smaller design") == "other smaller designs"
    assert counted(2, "person", "people") == "2 people"


def test_a_one_template_run_shows_a_sentence_in_place_of_its_jaccard_heatmap():
    drawn = []
    one = jaccard_views(pd.DataFrame([[1.0]], index=["t1"], columns=["t1"]), "r" * 24, lambda: drawn.append(1))
    assert not drawn and not one["jaccard"]["visible"] and one["jaccard"]["value"] is None
    note = one["jaccard_note"]
    assert note["visible"] and "1 template (`t1`)" in note["value"] and "r" * 24 in note["value"]
    assert "templates)" not in note["value"]
    import plotly.graph_objects as go

    two = jaccard_views(pd.DataFrame([[1.0, 0.5], [0.5, 1.0]], index=["a", "b"], columns=["a", "b"]), "r",
                        lambda: go.Figure())
    assert two["jaccard"]["visible"] and two["jaccard"]["value"] is not None and not two["jaccard_note"]["visible"]
    # while a run is going its place says when the figure comes, naming the run
    pending = pending_views("p" * 24, 1, 1)
    assert "p" * 24 in pending["jaccard_note"]["value"] and "its batch of run" in pending["jaccard_note"]["value"]


def test_an_uploaded_study_empties_the_bundled_study_box_and_counts_in_the_singular(tmp_path, service):
    meta, concepts, events, templates = study_fields(tab_study())
    from petri.web.ui.study_tab.study import fields_to_dict

    data = fields_to_dict(meta, concepts, events, templates.iloc[:1], "benign, contradictory", "")
    path = tmp_path / "one.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    ctl = StudyController(service)
    out = ctl.load_upload(str(path))
    assert len(out) == 9 and out[-1]["value"] is None  # the Bundled-study box: emptied
    note = out[7]
    assert "(uploaded `one.json`)" in note and ", 1 template." in note and "1 templates" not in note
    bundled = ctl.load_builtin("inventory_order.json")
    assert bundled[-1] == {"__type__": "update"} and "(bundled `inventory_order.json`)" in bundled[7]
