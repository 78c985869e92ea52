"""The Gradio UI (Blocks + plotly): the result tabs of :data:`RESULT_TABS` (*Dish*, *Compare*,
*Study*, *Probe*), then *Runs* and *Model*, all over the one service.

Thin over :class:`~petri.app.service.PetriService` and :mod:`petri.web.api.requests`: every model job goes
through the service's lock (the UI's queue runs one job per event handler; an API job running at the
same time makes the UI wait), and every request is checked by the functions the API calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from petri.app.service import PetriService
from petri.web.access import AccessPolicy
from petri.web.gpu_executor import on_zero_gpu
from petri.web.ui.access import UiAccess
from petri.web.ui.api_endpoints import register_api_endpoints
from petri.web.ui.compare import build_compare_tab
from petri.web.ui.dish_tab.dish import build_dish_tab
from petri.web.ui.model import model_markdown
from petri.web.ui.probe_tab.probe import build_probe_tab
from petri.web.ui.probe_tab.probe_views import ANSWERS_PHONE_CSS
from petri.web.ui.runs import RUNS_PHONE_CSS, RunsController, build_runs_tab
from petri.web.ui.study_tab.study import build_study_tab

UI_CSS = """
#petri-canvas, #petri-cmp-canvas, #petri-heatmap { min-height: 0; }
.petri-note { color: var(--body-text-color-subdued); font-size: 0.9em; }
/* download lists: a long name (run id + figure) wraps instead of being cut to its first letters */
td.filename .stem { white-space: normal; overflow-wrap: anywhere; text-overflow: clip; }
/* an empty figure or download list (nothing run yet) is a slim line under its label, not a 200 px
   placeholder: eleven of them made the Dish page 3,000 px long before its first run */
#petri-tabs .block .empty.large.unpadded_box { min-height: 2.5rem !important; height: 2.5rem !important; }
#petri-tabs .block .empty.large.unpadded_box .icon { height: 1.5rem !important; width: 1.5rem !important; }
/* the whole-trajectory figure keeps readable cells: a canvas wider than the page scrolls sideways */
.petri-wide-figure { overflow-x: auto !important; }
.petri-wide-figure .js-plotly-plot, .petri-wide-figure .plot-container { width: max-content !important; }
/* a final text reads as running text (issue 60): its pieces inline, a word broken only where it is
   longer than the line (Gradio's flex pieces put each anchor on a line of its own and broke words anywhere) */
.petri-text .textfield { display: block !important; word-break: normal !important; overflow-wrap: break-word !important; line-height: 2; }
.petri-text .token-container, .petri-text .token, .petri-text .token .text { display: inline !important; }
.petri-text .token .text { white-space: pre-wrap !important; }
.petri-text .token.highlighted { padding: 1px 3px; border-radius: 4px; }
/* the Model tab's tables keep words whole (Gradio's prose breaks anywhere, so at 420 px the first
   column shrank to 46 px and read "pr/o/p/er/ty"); a code value (a path, a class name) may still break;
   on a phone the cells are smaller so the widest table (four columns) fits the page */
#petri-model table :is(th, td) { overflow-wrap: break-word !important; word-break: normal !important; }
#petri-model table code { overflow-wrap: anywhere !important; }
@media (max-width: 600px) { #petri-model table { font-size: 13px !important; } #petri-model table :is(th, td) { padding: 6px !important; } }
/* six tabs in one row of a 420 px screen's tab bar (with their default 16 px padding they took two) */
@media (max-width: 600px) { #petri-tabs button[role=tab] { padding-left: 7px !important; padding-right: 7px !important; } }
""" + RUNS_PHONE_CSS + ANSWERS_PHONE_CSS


@dataclass(frozen=True)
class ResultTab:
    """A tab that shows results and reopens the stored runs of its kind (its id is the kind).
    ``build(service, access, controllers)`` builds it inside its ``gr.Tab`` (``controllers``: those of
    the tabs built before it) and returns (its controller, its views by name, ``status`` among them);
    how its runs reopen is :data:`petri.web.ui.runs.REOPEN`."""

    kind: str
    label: str
    build: Callable[[PetriService, UiAccess, dict], tuple[object, dict]]


#: The result tabs, in their order on the page; the Runs and Model tabs follow them.
RESULT_TABS = (
    ResultTab("dish", "Dish", lambda service, who, built: build_dish_tab(service, who)),
    ResultTab("compare", "Compare", lambda service, who, built: build_compare_tab(service, built["dish"], who)),
    ResultTab("study", "Study", lambda service, who, built: build_study_tab(service, who)),
    ResultTab("probe", "Probe", lambda service, who, built: build_probe_tab(service, who)),
)

#: Run in the browser on a tab change: a window resize once the tab is drawn (plotly fits its figures).
RELAYOUT_JS = "() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 100); }"


def build_ui(service: PetriService, model_source: str | None = None, access: AccessPolicy = AccessPolicy()) -> gr.Blocks:
    """The Blocks app: Dish, Compare, Study, Probe, Runs and Model tabs; every handler that reaches stored
    runs or files answers only to its caller under ``access`` (:mod:`petri.web.ui.access`)."""
    lm = service.lm
    who = UiAccess(access)
    with gr.Blocks(title="Concept Petri Dish", analytics_enabled=False) as demo:
        gr.Markdown(
            "# Concept Petri Dish\n"
            "Pin concepts on a text-diffusion canvas, let the model fill in the relations, and watch where "
            "it struggles: positions whose most likely token keeps **flipping** between denoising steps. "
            f"Model: `{lm.model_id}` on `{lm.device}`. HTTP API: [`/docs`](/docs)."
        )
        # "wrap": on a narrow screen every tab stays in view (the default menu hid Runs behind "⋯" at 420 px)
        with gr.Tabs(elem_id="petri-tabs", overflow_behavior="wrap") as tabs:
            controllers: dict = {}
            views: dict = {}
            for tab in RESULT_TABS:
                with gr.Tab(tab.label, id=tab.kind):
                    controllers[tab.kind], views[tab.kind] = tab.build(service, who, controllers)
            with gr.Tab("Runs", id="runs") as runs_tab:
                runs = RunsController(service, controllers)
                build_runs_tab(service, tabs, runs_tab, runs, views, who)
            with gr.Tab("Model", id="model"):
                gr.Markdown(model_markdown(service, model_source), elem_id="petri-model")
        # a figure drawn while its tab was hidden keeps the width it had then (plotly relays out on a
        # window resize, which a hidden plot misses): a resize once the new tab is shown fits it
        tabs.select(None, None, None, js=RELAYOUT_JS, queue=False, show_progress="hidden")
        if on_zero_gpu():  # the API's GPU work, as Gradio endpoints (the FastAPI routes answer 501 there)
            register_api_endpoints(service, who)
    return demo
