"""The Dish tab: concepts, an event and a template (or one of the examples), the anchor slots placed
by dragging concept chips along the canvas (:mod:`petri.web.ui.widgets.canvas`) or typed into the slot
table (kept in sync), a run whose flip map is redrawn live as the steps arrive, then the final text
(as the model's answer), flips per position, pair instability and the CSV downloads.

Thin over the web layer: the canvas preview is :func:`~petri.web.api.requests.preview_layout`, the
checks are :func:`~petri.web.api.requests.prepare_seed` (those of ``POST /api/seed``), the run is a
job of the service's queue (:meth:`~petri.app.service.PetriService.submit_seed`, as ``POST
/api/jobs/seed``), streamed by :func:`petri.web.ui.live.stream`: the sampler's ``on_step`` hook
reports each step (:class:`petri.engine.base.LiveStep`) and the run handler, a generator, redraws the flip map as the steps
arrive (:class:`petri.web.ui.dish_tab.dish_live.LiveDish`); the Cancel button stops the job within one step.
The slot table, the canvas and the sampler settings are built by :mod:`petri.web.ui.dish_tab.dish_controls`,
which the Compare tab shares.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import gradio as gr
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from pydantic import ValidationError

from petri.app.jobs import QueueFull
from petri.app.service import PetriService, SeedResult
from petri.core.dish import DEFAULT_TEMPLATE
from petri.core.trajectory import Trajectory
from petri.core.watch import Watch
from petri.core.wording import counted
from petri.measure.metrics import flip_grid
from petri.measure.tables import pairs_table, samples_table
from petri.runs.export import token_decoder
from petri.study.figures.anchor_marks import aggregate_anchor_boxes
from petri.study.figures.plots import flip_heatmap, flips_bar, token_texts
from petri.web.access import Caller
from petri.web.api.requests import SeedRequest, prepare_seed, preview_layout
from petri.web.api.responses import write_run_files
from petri.web.errors import FieldError
from petri.web.gpu_executor import GpuAborted, on_zero_gpu
from petri.web.limits import MAX_SAMPLES
from petri.web.ui.access import UiAccess, export_dir
from petri.web.ui.dish_tab.dish_controls import (
    PLACEMENT_COLUMNS,
    chip_canvas,
    control_of,
    control_values,
    placement_controls,
    sampler_settings,
    setting_controls,
    settings_inputs,
    settings_request,
    wire_placement,
)
from petri.web.ui.dish_tab.dish_live import LiveDish, throttled, title_at_top
from petri.web.ui.gpu_quota import capped_seed, cost_box, seed_cost
from petri.web.ui.live import QUEUED_LINE, JobCancelled, field_validation, stream, wire_run, zerogpu_stream
from petri.web.ui.views import (
    END_TOKEN_COLOR,
    END_TOKEN_LABEL,
    TokenText,
    concept_colors,
    highlighted_text,
    parse_concepts,
    request_error_message,
    samples_columns,
)
from petri.web.ui.widgets.canvas import canvas_value, placement_rows
from petri.web.ui.widgets.figure_files import add_figure_downloads
from petri.web.ui.widgets.trajectory import TrajectoryView, mode_of, run_label

TEMPLATES = [
    DEFAULT_TEMPLATE,
    "{event}",
    "Event: {event}\nWrite a short report about this event that mentions {concepts}.",
    "Here is what happened: {event}\nExplain the situation in terms of {concepts}.",
]
#: How a template's newline shows in the template dropdown (a one-line box cannot show "\n").
NEWLINE_MARK = "⏎"
#: The dropdown's (label, value) choices: the label marks each newline, the value is the true text.
TEMPLATE_CHOICES = [(t.replace("\n", NEWLINE_MARK), t) for t in TEMPLATES]


def template_text(value: str | None) -> str:
    """The template a dropdown value stands for: a typed or shown ``NEWLINE_MARK`` is a newline."""
    return (value or DEFAULT_TEMPLATE).replace(NEWLINE_MARK, "\n")


def template_control(text: str) -> str:
    """The dropdown value that shows stored template ``text``: the choice's value when it is one,
    else the text with its newlines marked (so the one-line box keeps them)."""
    return text if text in TEMPLATES else text.replace("\n", NEWLINE_MARK)


#: The pair-instability table's columns as shown and their shares of its width.
PAIRS_COLUMNS = ["pair", "segments", "instability"]
PAIRS_COLUMN_WIDTHS: list[str | int] = ["38%", "28%", "34%"]

EXAMPLE_EVENT = "Only 90 units are in stock, but a customer ordered 120."
EXAMPLE_CONCEPTS = "order, inventory, person"
#: The Dish tab's examples (concepts, event): benign and contradictory events of the shipped study.
EXAMPLES = [
    [EXAMPLE_CONCEPTS, "The customer placed an order, and the warehouse packed it the same afternoon."],
    [EXAMPLE_CONCEPTS, "A sales assistant checked the inventory before confirming the customer's order."],
    [EXAMPLE_CONCEPTS, EXAMPLE_EVENT],
    [EXAMPLE_CONCEPTS, "The order for 40 units shipped in full, although the inventory held no units at all."],
]
EXAMPLE_LABELS = ["benign: packed the same afternoon", "benign: inventory checked first",
                  "contradictory: 120 ordered, 90 in stock", "contradictory: shipped from empty stock"]


def _placement(concepts: list[str], spans) -> pd.DataFrame:
    """The slot table: each concept's start and token count (0 and 0 where it has no span)."""
    by_concept = {s.concept: s for s in spans}
    rows = [[c, int(by_concept[c].start), len(by_concept[c].token_ids)] if c in by_concept else [c, 0, 0]
            for c in concepts]
    return pd.DataFrame(rows, columns=PLACEMENT_COLUMNS)


class DishController:
    """The Dish tab's handlers (kept apart from the layout code so they can be called directly)."""

    def __init__(self, service: PetriService):
        self.service = service
        self.lm = service.lm
        self.tokens = TokenText(self.lm.tokenizer)
        self.trajectory = TrajectoryView(service, self.tokens)
        #: the served model's settings: its family's setting controls are the tab's
        self.defaults = self.lm.default_settings()
        self.setting_names = tuple(c.control for c in setting_controls(self.defaults))
        self.input_of_field = {**self.INPUT_OF_FIELD, **settings_inputs(self.defaults, len(self.INPUT_OF_FIELD))}

    # -- placement ------------------------------------------------------------------------
    def spread(self, concepts_text: str, pin_thought: bool = True) -> pd.DataFrame:
        """The concepts spread evenly over the free canvas (as a run without positions lays them)."""
        concepts = [c for c in parse_concepts(concepts_text) if c]
        return _placement(concepts, preview_layout(self.lm, concepts, None, pin_thought).spans)

    def shuffle(self, placement: pd.DataFrame, pin_thought: bool = True) -> pd.DataFrame:
        """The concepts in a random order over the same slots (spread evenly where they do not fit)."""
        table = self._clean(placement)
        if table.empty:
            return table
        order = np.random.default_rng().permutation(len(table))
        concepts = table["concept"].iloc[order].tolist()
        preview = preview_layout(self.lm, concepts, sorted(table["start"].tolist()), pin_thought)
        if preview.error:
            preview = preview_layout(self.lm, concepts, None, pin_thought)
        return _placement(concepts, preview.spans)

    @staticmethod
    def _clean(placement) -> pd.DataFrame:
        table = pd.DataFrame(placement, columns=PLACEMENT_COLUMNS) if not isinstance(placement, pd.DataFrame) else placement.copy()
        if table.empty:
            return pd.DataFrame(columns=PLACEMENT_COLUMNS)
        table = table[table["concept"].astype(str).str.strip() != ""]
        table["concept"] = table["concept"].astype(str).str.strip()
        table["start"] = pd.to_numeric(table["start"], errors="coerce").fillna(0).astype(int)
        return table.reset_index(drop=True)

    def respread(self, concepts_text: str, pin_thought: bool, placement) -> pd.DataFrame | dict:
        """The slot table after the concept field or the thought-block pin changed: kept when it
        already holds exactly those concepts in a layout that fits (e.g. a reopened run's placement,
        or a reordered concept list), else the concepts spread evenly."""
        table = self._clean(placement)
        concepts = [c for c in parse_concepts(concepts_text) if c]
        if not table.empty and sorted(table["concept"]) == sorted(concepts):
            if not preview_layout(self.lm, list(table["concept"]), [int(v) for v in table["start"]], pin_thought).error:
                return gr.update()
        return self.spread(concepts_text, pin_thought)

    def controls_of(self, request: dict, traj: Trajectory) -> dict:
        """Every input of the tab set to stored run ``request``'s values (the run's first event;
        ``traj`` its trajectory, for runs stored before the request kept the template, positions
        and shuffle): pressing Run again starts the same run. The sampler settings are the served
        family's controls (:func:`~petri.web.ui.dish_tab.dish_controls.control_values`)."""
        first = request["events"][0]
        concepts = list(first["concepts"])
        settings = control_values(self.defaults, request["settings"])
        shuffle = first.get("shuffle")
        if shuffle is None:  # stored before the request kept it: shuffled when the samples' layouts differ
            shuffle = len({tuple(a.concept for a in spans) for spans in traj.anchors}) > 1
        positions = first.get("positions")
        if positions is None and "positions" not in first and not shuffle:  # older runs: sample 0's slots
            by_concept = {a.concept: a.start for a in traj.anchors[0]}
            positions = [by_concept[c] for c in concepts] if set(by_concept) == set(concepts) else None
        if positions is None:  # spread evenly, as the tab shows it
            table = self.spread(", ".join(concepts), settings[control_of(self.defaults, "pin_thought_channel")])
        else:
            tokens = {a.concept: len(a.token_ids) for a in traj.anchors[0]}
            table = pd.DataFrame([[c, int(p), tokens.get(c, 0)] for c, p in zip(concepts, positions)],
                                 columns=PLACEMENT_COLUMNS)
        return {
            "concepts": ", ".join(concepts), "event": first["event"],
            "template": template_control(first.get("template") or traj.template or DEFAULT_TEMPLATE),
            "samples": int(request["n_samples"]), "seed": int(request.get("seed") or 0), "placement": table,
            "shuffle": bool(shuffle), **settings,
        }

    def canvas(self, placement, pin_thought: bool = True, seq: int | None = None, shuffled: bool = False) -> dict:
        """The canvas control's value for the slot table: its chips where the table puts them, the
        layout check's error (the seed check's refusal) if the table's layout fails it, ``seq``
        (the newest chip move the table holds, None: a table the server set; see :mod:`petri.web.ui.widgets.canvas`)
        and whether each sample shuffles the concepts over these slots (the canvas says so)."""
        table = self._clean(placement)
        concepts = list(table["concept"])
        preview = preview_layout(self.lm, concepts, [int(s) for s in table["start"]], pin_thought)
        return canvas_value(preview, concept_colors(concepts), seq, shuffled)

    def from_canvas(self, value: dict | None) -> pd.DataFrame:
        """The slot table after a move on the canvas (the chips' starts, in chip order)."""
        return pd.DataFrame(placement_rows(value), columns=PLACEMENT_COLUMNS)

    # -- the run ----------------------------------------------------------------------------
    def build_request(self, concepts_text, event, template, samples, seed, placement, shuffle, *settings,
                      events: list[dict] | None = None) -> SeedRequest:
        """The tab's inputs as the ``POST /api/seed`` body they stand for (with ``events``, e.g. the
        Compare tab's two, instead of ``event``); ``settings`` are the values of the served family's
        setting controls in :attr:`setting_names`' order (``steps``, ``entropy_bound``, ``t_min``,
        ``t_max``, ``adaptive``, ``pin_thought``, … for DiffusionGemma; a value left ``None``, or
        not given, is the model's default)."""
        return self.request_of(concepts_text, event, template, samples, seed, placement, shuffle,
                               dict(zip(self.setting_names, settings)), events)

    def request_of(self, concepts_text, event, template, samples, seed, placement, shuffle, settings: dict,
                   events: list[dict] | None = None) -> SeedRequest:
        """:meth:`build_request` with the setting controls' values by name."""
        concepts = parse_concepts(concepts_text)
        table = self._clean(placement)
        positions = None
        if list(table["concept"]) and sorted(table["concept"]) == sorted(c for c in concepts if c):
            concepts = list(table["concept"])  # the table's order is the slot order
            positions = [int(s) for s in table["start"]]
        return SeedRequest(
            concepts=concepts, event=None if events is not None else (event or None), events=cast(Any, events),  # dicts: validated
            template=template_text(template),
            positions=positions, shuffle=bool(shuffle), samples=int(samples or 1),
            settings=settings_request(self.defaults, settings), seed=int(seed or 0),
        )

    #: Where a request field's error is shown: the index of the UI input that holds it (the sampler
    #: settings' follow, :attr:`input_of_field`).
    INPUT_OF_FIELD = {"concepts": 0, "event": 1, "template": 2, "samples": 3, "seed": 4, "positions": 5, "shuffle": 6}

    def validate(self, *inputs) -> list[dict]:
        """Gradio validator: one ``gr.validate`` per input, the bad ones carrying the message
        (the same checks as ``POST /api/seed``), so the UI marks the field itself."""
        return self.seed_validation(len(inputs), lambda: self.build_request(*inputs), self.input_of_field)

    def seed_validation(self, n_inputs: int, build, input_of_field: dict, event_inputs: tuple = ()) -> list[dict]:
        """:func:`~petri.web.ui.live.field_validation` of the seed request ``build()`` makes (the Dish
        and Compare tabs' validators): a field's error marks input ``input_of_field[field]``, event
        ``i``'s input ``event_inputs[i]``, and a layout error the slot table where the user placed them."""
        built: list[SeedRequest] = []

        def check() -> None:
            built.append(build())
            prepare_seed(built[0], self.lm)

        def input_of(loc: list, kind: str) -> int:
            head = str(loc[0]) if loc else ""
            if kind == "layout_error" and built and built[0].positions is not None:
                return input_of_field["positions"]  # the slots the user placed
            if head == "events" and len(loc) > 1 and isinstance(loc[1], int) and loc[1] < len(event_inputs):
                return event_inputs[loc[1]]
            return input_of_field.get(head, 0)

        return field_validation(n_inputs, check, input_of)

    def run(self, *inputs, cancel: threading.Event | None = None, caller: Caller | None = None):
        """Generator: validate, start the job in a worker thread, redraw the heatmap per step,
        then yield every result. Yields dicts keyed by output component name; ``cancel`` is the hook
        a Cancel button sets (:func:`petri.web.ui.live.stream`); ``caller`` owns the run (None: local)."""
        try:
            _, plan, capped = capped_seed(self.build_request(*inputs), self.lm)  # ZeroGPU: capped to one call
        except (ValidationError, FieldError) as err:
            raise gr.Error(request_error_message(err), title="Check the dish") from None
        live = LiveDish(self.lm, self.tokens, plan.events[0])
        steps_max = plan.settings.max_denoising_steps
        zero_gpu = on_zero_gpu()  # ZeroGPU: the GPU call runs from this handler, no job (petri.web.gpu_executor)

        jobs: list = []  # the job, once queued (its run id names a cancelled run)

        def submit(emit):
            jobs.append(self.service.submit_seed(plan, owner=caller.owner if caller else None, watch=Watch(on_step=emit)))
            return jobs[0]

        # every result panel is cleared at once: nothing of the previous run stays beside this one
        yield {**self.cleared_views(), **({"status": QUEUED_LINE if self.service.busy else capped} if self.service.busy or capped else {})}
        result: SeedResult | None = None
        try:
            events = (zerogpu_stream(self.service, plan, caller.owner if caller else None, cancel) if zero_gpu
                      else stream(submit, self.service.jobs, cancel=cancel, idle=True))
            for kind, payload in throttled(events, live.add):
                if kind == "done":
                    result = payload
                    break
                index, finished = payload.index, payload.finished
                yield {
                    "status": f"Sampling… step {index + 1} of at most {steps_max} "
                              f"({int(sum(finished))}/{len(finished)} samples settled)",
                    "heatmap": live.heatmap(index), **live.trajectory(self.trajectory),
                }
        except QueueFull as err:
            raise gr.Error(f"The model is busy: {err}", title="Busy") from None
        except (JobCancelled, GpuAborted) as stop:  # an aborted GPU call keeps its finished steps, as a cancel
            run_id = jobs[0].run_id if jobs else (plan.run_id if zero_gpu else None)
            yield self.cancelled_views(live, len(live.flips.rows) - 1, stop, run_id)
            return
        except Exception as err:  # noqa: BLE001 - shown to the user
            raise gr.Error(f"Sampling failed: {err}") from None
        result = cast(SeedResult, result)  # stream() ends with "done" or raises
        traj = result.trajectories[0]
        yield {
            **self.result_views(result.run_id, result.trajectories, result.groups, caller),
            "status": (f"Done: run `{result.run_id}` — {counted(traj.n_samples, 'sample')}, steps {traj.steps.tolist()}, "
                       f"{result.wall_s:.2f} s on {traj.device}. Stored; also at `/api/runs/{result.run_id}`."),
        }

    def result_views(self, run_id: str, trajectories: list[Trajectory], groups: list, caller: Caller | None = None) -> dict:
        """Every result view of a stored dish run's first event (heatmap, text, flips, pairs,
        samples, downloads in ``caller``'s folder): after a run, and when a past run is reopened
        (nothing is sampled)."""
        traj = trajectories[0]
        files = write_run_files(run_id, trajectories, groups, export_dir(caller) / run_id,
                                token_decoder(self.lm.tokenizer, self.lm.model_id, trajectories))
        # named by the run, so two runs' downloads never collide in one folder (positions.csv …)
        files = [path.replace(path.with_name(f"{run_id}-{path.name}")) for path in files]
        return {
            "run_badge": f"**Results below:** run `{run_id}`.",
            "heatmap": self.final_heatmap(traj, run_id),
            "run_id": run_id,
            **self.sample_views(traj, 0),
            "pairs": self.pairs_view(traj),
            "samples_table": self.samples_view(traj),
            "files": [str(p) for p in files],
            "sample": gr.update(maximum=max(traj.n_samples - 1, 1), value=0, interactive=traj.n_samples > 1),
            **self.trajectory.views(run_id, 0, traj),
        }

    def final_heatmap(self, traj: Trajectory, run_id: str = "") -> go.Figure:
        """The finished dish's flip map: samples flipping per step and free position (titled with
        ``run_id``, when given, on a line of its own; the title at the figure's top, clear of the
        anchor labels stacked above the plot)."""
        fig = flip_heatmap(
            flip_grid(traj.argmax, traj.steps, traj.anchor_mask).sum(axis=0), n_samples=traj.n_samples,
            anchors=aggregate_anchor_boxes(traj.anchors), pinned=traj.anchor_mask.all(axis=0), blank_pinned=True,
            tokens=token_texts(self.tokens, traj.argmax[0]), colors=concept_colors([a.concept for a in traj.anchors[0]]),
            # the run on a line of its own: on one line the title ran past a 420 px screen's figure
            title=(f"{run_label(run_id).removesuffix(' · ')}<br>" if run_id else "")
            + f"flips per step and position ({counted(traj.n_samples, 'sample')})",
        )
        return title_at_top(fig)

    def cleared_views(self) -> dict:
        """Every result panel emptied, as a Run starts (the run badge says a run is sampling)."""
        return {
            "run_badge": "**Results below:** the run now sampling (its id comes when it is stored).",
            "heatmap": None, "run_id": "", "final_text": gr.update(value=[]), "flips": None,
            "pairs": pd.DataFrame(columns=PAIRS_COLUMNS),
            "samples_table": pd.DataFrame(columns=list(samples_columns())), "files": None,
            "sample": gr.update(value=0, maximum=1, interactive=False),  # not the last run's range
            **self.trajectory.cleared("Sampling: the trajectory follows."),
        }

    def cancelled_views(self, live: LiveDish, last_step: int, stop: Exception, run_id: str | None = None) -> dict:
        """What a cancelled run (``run_id``, when it got one) leaves on screen: its partial flip map
        and trajectory labelled "cancelled at step k" ("stopped" for an aborted ZeroGPU call; k its last
        step, counted from 0 as the viewer and the flip map count them), every other panel empty."""
        verb = "stopped" if isinstance(stop, GpuAborted) else "cancelled"
        where = f"{verb} at step {last_step}" if last_step >= 0 else f"{verb} before its first step"
        named = f"run `{run_id}`" if run_id else "the run"
        views: dict[str, Any] = {"run_badge": f"**Results below:** {named}, {where} (partial: an event that did not finish is not stored).",
                 "status": f"Stopped: {stop}; {where}."}
        if last_step >= 0:
            views["heatmap"] = live.heatmap(last_step, f"{run_label(run_id or '')}{verb}")
            record = live.trajectory(self.trajectory)
            name = self.trajectory.name("view")
            views[name] = {**record[name], "live": False, "key": "cancelled", "status": where,
                           "title": f"sample 0 ({verb} run)"}
        return views

    def figures(self, stored: list, sample=0) -> dict[str, go.Figure]:
        """The tab's figures of a stored dish (``stored`` as ``load_events`` gives it), for downloads."""
        traj = stored[0][2]
        sample = min(max(int(sample or 0), 0), traj.n_samples - 1)
        return {"flip-heatmap": self.final_heatmap(traj), f"flips-sample{sample}": flips_bar(traj, sample, self.lm.tokenizer)}

    def sample_views(self, traj: Trajectory, sample: int) -> dict:
        """The highlighted final text and the flips bar of one sample."""
        colors = concept_colors(sorted({a.concept for spans in traj.anchors for a in spans}))
        sample = min(max(sample, 0), traj.n_samples - 1)
        pieces = highlighted_text(traj, sample, self.tokens)
        color_map = {**colors, **({END_TOKEN_LABEL: END_TOKEN_COLOR} if any(kind == END_TOKEN_LABEL for _, kind in pieces) else {})}
        return {
            "final_text": gr.update(value=pieces, color_map=color_map),
            "flips": flips_bar(traj, sample, self.lm.tokenizer),
        }

    @staticmethod
    def pairs_view(traj: Trajectory) -> pd.DataFrame:
        """The pair-instability table as shown (:data:`PAIRS_COLUMNS`; the CSV keeps ``n_segments``
        and ``a|b``): a pair's names with spaces around the bar, so a narrow column wraps between
        the words, and headers short enough to stay whole on a 420 px screen."""
        table = pairs_table(traj)[["pair", "n_segments", "instability"]].rename(columns={"n_segments": "segments"})
        table["pair"] = table["pair"].str.replace("|", " | ", regex=False)
        return table.sort_values("instability", ascending=False, na_position="last").round(3)

    @classmethod
    def samples_view(cls, traj: Trajectory) -> pd.DataFrame:
        return samples_table(traj)[list(samples_columns())].copy().round(3)

    def show_sample(self, run_id: str, sample: int, caller: Caller | None = None, mode: str = "canvas") -> dict:
        """A stored run's sample (the sample slider), if ``caller`` (None: local) may open the run;
        the viewer and its figure keep showing ``mode`` (the viewer's choice)."""
        if not run_id:
            return {}
        UiAccess.open_run(self.service, caller or Caller(public=False), run_id)
        stored = self.service.load_events(run_id)
        if not stored:
            return {}
        traj = stored[0][2]
        sample = min(max(int(sample), 0), traj.n_samples - 1)
        views = self.trajectory.views(run_id, 0, traj, sample, mode=mode)  # the one selector moves the viewer too
        views[self.trajectory.name("sample")] = sample
        return {**self.sample_views(traj, sample), **views}


def build_dish_tab(service: PetriService, access: UiAccess | None = None) -> tuple[DishController, dict]:
    """The Dish tab's components and events (inside an open ``gr.Tab``; ``access`` says who calls
    each handler); returns its controller and its result components by name (the Runs tab reopens
    a stored dish into them)."""
    access = access or UiAccess()
    ctl = DishController(service)
    with gr.Row():
        with gr.Column(scale=3):
            concepts = gr.Textbox(EXAMPLE_CONCEPTS, label="Concepts (2–8, comma-separated)", elem_id="petri-concepts")
            event = gr.Textbox(EXAMPLE_EVENT, label="Event", lines=3, max_length=2000, elem_id="petri-event")
            template = gr.Dropdown(TEMPLATE_CHOICES, value=DEFAULT_TEMPLATE, allow_custom_value=True,
                                   label="Prompt template ({event}, {concepts})")
            gr.Examples(EXAMPLES, [concepts, event], label="Examples (benign and contradictory events)",
                        example_labels=EXAMPLE_LABELS, elem_id="petri-examples")
        with gr.Column(scale=2):
            slots = placement_controls(ctl, EXAMPLE_CONCEPTS)
    canvas = chip_canvas(ctl, EXAMPLE_CONCEPTS)
    with gr.Row():
        samples = gr.Slider(1, MAX_SAMPLES, value=8, step=1, label="Samples", elem_id="petri-samples")
        seed = gr.Number(0, precision=0, minimum=0, label="Seed")
    settings = sampler_settings(ctl.defaults)
    controls = {"concepts": concepts, "event": event, "template": template, "samples": samples, "seed": seed,
                "placement": slots["placement"], "shuffle": slots["shuffle"], **settings}
    run_inputs = list(controls.values())
    cost_box(run_inputs, lambda *values: seed_cost(ctl.build_request(*values), ctl.lm), "petri-cost")
    with gr.Row():
        run_btn = gr.Button("Run the dish", variant="primary", elem_id="petri-run", scale=4)
        cancel_btn = gr.Button("Cancel", variant="stop", elem_id="petri-cancel", scale=1)
    status = gr.Markdown("", elem_id="petri-status")
    run_badge = gr.Markdown("", elem_id="petri-run-badge")
    heatmap = gr.Plot(label="Flips: step × position (live)", show_label=False, elem_id="petri-heatmap")
    trajectory = ctl.trajectory.build("Trajectory", access, sample_selector=False)  # the tab's one selector drives it
    run_id = gr.State("")
    with gr.Row():
        sample = gr.Slider(0, 1, value=0, step=1, label="Sample (numbered from 0, as in the CSVs)", interactive=False,
                           elem_id="petri-sample")
    final_text = gr.HighlightedText(label="Final text: what the model wrote (anchors highlighted, special tokens "
                                    "hidden, end-of-turn tokens marked)", combine_adjacent=True,
                                    show_legend=True, elem_id="petri-final", elem_classes=["petri-text"])
    flips = gr.Plot(label="Flips per position", show_label=False, elem_id="petri-flips")
    with gr.Row():
        pairs = gr.Dataframe(pd.DataFrame(columns=PAIRS_COLUMNS),
                             label="Pair instability (mean flips between adjacent anchors)", wrap=True,
                             interactive=False, elem_id="petri-pairs", min_width=320,
                             # every column in view on a 420 px screen: the pair's names wrap, the values stay whole
                             column_widths=PAIRS_COLUMN_WIDTHS)
        files = gr.File(label="CSV downloads (tidy tables + run.json)", file_count="multiple",
                        interactive=False, elem_id="petri-files", min_width=280)
    with gr.Accordion("Samples", open=False):
        samples_table_view = gr.Dataframe(interactive=False, wrap=True, elem_id="petri-samples-table",
                                          column_widths=[f"{w}px" for w in samples_columns().values()])

    add_figure_downloads(service, run_id, ctl.figures, access, [sample], "petri-dish-figures")
    names = {"status": status, "run_badge": run_badge, "heatmap": heatmap, "run_id": run_id, "final_text": final_text,
             "flips": flips, "pairs": pairs, "samples_table": samples_table_view, "files": files,
             "sample": sample, **trajectory}

    wire_placement(ctl, concepts, slots, canvas, settings[control_of(ctl.defaults, "pin_thought_channel")])
    wire_run(run_btn, cancel_btn, ctl.run, run_inputs, names, access, busy=lambda: service.busy,
             validator=ctl.validate, concurrency_limit=1, concurrency_id="model", show_progress="minimal")

    def sample_handler(request: gr.Request, rid, s, shown_view):
        return {names[k]: v for k, v in ctl.show_sample(rid, s, access.caller(request), mode_of(shown_view)).items()}

    # every way the value moves (drag, arrow keys, a number typed in its box); the last one wins.
    # One selector for every panel: the final text, the flips chart, the viewer and its downloads
    shown = [final_text, flips, *(trajectory[ctl.trajectory.name(p)] for p in ("view", "key", "figure", "curves", "files", "sample"))]
    sample.input(sample_handler, [run_id, sample, trajectory[ctl.trajectory.name("view")]], shown, show_progress="hidden",
                 trigger_mode="always_last")
    return ctl, {**names, **controls}
