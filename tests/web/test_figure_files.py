"""The UI's "Download figures": the writer (names, HTML holding the figure's data) and the Dish
tab's button, which writes the figures of the run on screen into its caller's own folder."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go
import pytest
from test_public_access import ui_compare_run

from petri.app.service import SeedEvent
from petri.core.dish import Dish
from petri.web.access import CALLER_COOKIE, AccessPolicy, Caller
from petri.web.app import create_app
from petri.web.ui.access import export_dir
from petri.web.ui.widgets.figure_files import figure_files, write_figure_files

EVENT = "Only 90 units are in stock, but a customer ordered 120."


def test_the_writer_names_each_file_by_run_and_figure_and_the_html_holds_its_data(tmp_path):
    figures = {"flip-heatmap": go.Figure(go.Bar(x=["p0", "p1"], y=[271828.5, 314159.25])),
               "flips-sample3": go.Figure(go.Scatter(x=[0, 1], y=[161803.75, 141421.5]))}
    paths, notes = write_figure_files(figures, "run-abc", tmp_path, images=())
    assert sorted(p.name for p in paths) == ["run-abc-flip-heatmap.html", "run-abc-flips-sample3.html"]
    assert notes == []
    html = {p.name: p.read_text() for p in paths}
    assert "271828.5" in html["run-abc-flip-heatmap.html"] and "314159.25" in html["run-abc-flip-heatmap.html"]
    assert "161803.75" in html["run-abc-flips-sample3.html"] and "271828.5" not in html["run-abc-flips-sample3.html"]
    assert all("plotly" in text and len(text) > 1_000_000 for text in html.values())  # plotly.js inlined: opens offline


def test_the_dish_figures_are_the_stored_runs_and_answer_only_to_its_owner(service):
    from petri.web.ui.dish_tab.dish import DishController

    a, b = Caller(public=True, token="a" * 43), Caller(public=True, token="b" * 43)
    run_id = service.seed(service.plan([SeedEvent(Dish(concepts=["order", "inventory"], event=EVENT))], 3), owner=a.owner).run_id
    ctl = DishController(service)
    paths = figure_files(service, a, run_id, ctl.figures, 2, images=())
    names = sorted(p.rsplit("/", 1)[-1] for p in paths)
    assert names == [f"{run_id}-flip-heatmap.html", f"{run_id}-flips-sample2.html"]
    assert all(p.startswith(str(export_dir(a))) for p in paths)
    html = open(next(p for p in paths if "heatmap" in p)).read()
    assert "flips per step and position (3 samples)" in html  # this run's heatmap: it has 3 samples
    with pytest.raises(gr.Error, match="no stored run"):
        figure_files(service, b, run_id, ctl.figures, 0, images=())
    with pytest.raises(gr.Error, match="Run or reopen"):
        figure_files(service, a, "", ctl.figures, 0, images=())


def test_the_dish_tabs_button_yields_the_figures_of_its_run_on_a_public_server(live_server, service):
    from tests.web.test_public_access import file_urls, gradio_call, seed_body, visitor

    with live_server(create_app(service, access=AccessPolicy(public=True))) as live, \
            visitor(live.url) as v1, visitor(live.url) as v2:
        run = v1.post("/api/seed", json=seed_body(seed=7)).json()["run_id"]
        kind, out = gradio_call(v1, "open_handler", [run], session="v1-figures")  # the run on screen
        assert kind == "complete", out
        kind, out = gradio_call(v1, "petri_dish_figures", [1], session="v1-figures")
        assert kind == "complete", out
        urls = file_urls(out)
        names = {u.rsplit("/", 1)[-1] for u in urls}
        assert {f"{run}-flip-heatmap.html", f"{run}-flips-sample1.html"} <= names, names
        mine = str(export_dir(Caller(public=True, token=v1.cookies[CALLER_COOKIE])))
        for url in urls:
            route = url[url.index("/gradio_api/file="):]
            assert route[len("/gradio_api/file="):].startswith(mine)
            assert v1.get(route).status_code == 200 and v2.get(route).status_code == 404
        kind, out = gradio_call(v2, "petri_dish_figures", [1], session="v2-figures")
        assert kind == "error", out


def test_the_compare_figures_are_both_heatmaps_and_the_difference_of_the_stored_run(service):
    caller = Caller(public=True, token="c" * 43)
    ctl, run_id = ui_compare_run(service, caller, ("calm", "tense"))
    paths = figure_files(service, caller, run_id, ctl.figures, images=())
    html = {p.rsplit("/", 1)[-1]: open(p).read() for p in paths}
    assert sorted(html) == sorted(f"{run_id}-{n}.html" for n in ("heatmap-a", "heatmap-b", "difference"))
    assert "calm: flips per step and position (2 samples)" in html[f"{run_id}-heatmap-a.html"]
    assert "tense: flips per step and position (2 samples)" in html[f"{run_id}-heatmap-b.html"]
    assert "flip difference (tense − calm)" in html[f"{run_id}-difference.html"]


def test_the_study_tabs_figures_on_screen_are_written_under_the_run_id_they_carry(tmp_path):
    """The Study tab writes the plots' own values; the run id comes from ``layout.meta`` (tag_run) and
    only a hex id is used in a file name (a hostile one becomes "figures")."""
    from petri.study.figures.plots import tag_run
    from petri.web.ui.widgets.figure_files import shown_figures

    run = "0123456789abcdef0123456789abcdef"
    shown = {"instability": gr.Plot().postprocess(tag_run(go.Figure(go.Bar(y=[271828.5])), run)),
             "events": gr.Plot().postprocess(tag_run(go.Figure(go.Bar(y=[314159.25])), run)), "jaccard": None}
    run_id, figures = shown_figures(shown)
    assert run_id == run and sorted(figures) == ["events", "instability"]
    assert list(figures["instability"].data[0].y) == [271828.5]
    hostile = {"x": gr.Plot().postprocess(tag_run(go.Figure(go.Bar(y=[1])), "../../etc"))}
    assert shown_figures(hostile)[0] == "figures"
