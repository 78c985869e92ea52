"""The Compare tab: two events (e.g. benign vs contradictory) on the same concepts, the same anchor
layouts and the same seed, in one run (``POST /api/seed`` with two events: each event's batch is laid
out and seeded from the same seed, so sample ``s`` of A and sample ``s`` of B share their layout).
The inputs beyond the two events are the Dish tab's (:mod:`petri.web.ui.dish_tab.dish_controls`): the anchor
slots on the chip canvas or in the slot table, per-sample shuffle, and the sampler settings. While
it samples, each event's flip map and trajectory view are redrawn as its steps arrive
(:class:`petri.web.ui.dish_tab.dish_live.LiveDish`, as on the Dish tab). Shown after: both flip maps and their difference, per-pair
instability side by side, and the paired difference per sample (B − A), with each event's final text.

The tables are :func:`compare_pairs` and :func:`paired_samples` (pure, over
:func:`petri.measure.tables.pairs_table` / :func:`~petri.measure.tables.segments_table` / :func:`~petri.measure.tables.samples_table`).
"""

from __future__ import annotations

import threading
from typing import cast

import gradio as gr
import pandas as pd
from pydantic import ValidationError

from petri.app.jobs import QueueFull
from petri.app.service import PetriService, SeedResult
from petri.core.dish import DEFAULT_TEMPLATE
from petri.core.trajectory import Trajectory
from petri.core.watch import Watch
from petri.core.wording import counted
from petri.measure.metrics import flip_grid
from petri.measure.summary import EventSummary
from petri.measure.tables import pairs_table, samples_table, segments_table
from petri.study.figures.anchor_marks import aggregate_anchor_boxes
from petri.study.figures.plots import flip_difference_heatmap
from petri.web.access import Caller
from petri.web.errors import FieldError
from petri.web.gpu_executor import GpuAborted, on_zero_gpu
from petri.web.limits import MAX_SAMPLES
from petri.web.ui.access import UiAccess
from petri.web.ui.dish_tab.dish import EXAMPLE_CONCEPTS, TEMPLATE_CHOICES, DishController
from petri.web.ui.dish_tab.dish_controls import (
    chip_canvas,
    control_of,
    placement_controls,
    sampler_settings,
    settings_inputs,
    wire_placement,
)
from petri.web.ui.dish_tab.dish_live import LiveDish, throttled, title_at_top
from petri.web.ui.gpu_quota import capped_seed, cost_box, seed_cost
from petri.web.ui.live import QUEUED_LINE, JobCancelled, stream, wire_run, zerogpu_stream
from petri.web.ui.study_tab.stats import paired_tests_line
from petri.web.ui.views import END_TOKEN_COLOR, END_TOKEN_LABEL, concept_colors, highlighted_text, request_error_message
from petri.web.ui.widgets.figure_files import add_figure_downloads
from petri.web.ui.widgets.trajectory import TrajectoryView, mode_of, run_label

EXAMPLE_A = ("benign", "The customer placed an order, and the warehouse packed it the same afternoon.")
EXAMPLE_B = ("contradictory", "Only 90 units are in stock, but a customer ordered 120.")


def same_layouts(a: Trajectory, b: Trajectory) -> bool:
    """True when every sample of ``a`` has its anchors where the same sample of ``b`` has them."""
    return a.n_samples == b.n_samples and all(list(x) == list(y) for x, y in zip(a.anchors, b.anchors))


#: Room for each column of the two tables (px): every header word whole on its line ("sample" wrapped
#: as "sam/ple" and "contradictory" as "contradictor/y" in the columns the table shared out evenly);
#: a table wider than its panel (a phone) scrolls sideways.
PAIRS_WIDTHS: list[str | int] = ["150px", "200px", "180px", "200px"]
PAIRED_WIDTHS: list[str | int] = ["80px", "200px", "180px", "160px", "130px", "160px", "130px", "300px"]


def compare_pairs(a: Trajectory, b: Trajectory, labels: tuple[str, str]) -> pd.DataFrame:
    """Per-pair instability side by side: pair (``"a | b"``: "inventory|person" broke mid-word at
    420 px), ``B − A`` (the difference first, so it is in view on a narrow panel), ``instability <A>``,
    ``instability <B>``."""
    left = pairs_table(a)[["pair", "instability"]].rename(columns={"instability": f"instability {labels[0]}"})
    right = pairs_table(b)[["pair", "instability"]].rename(columns={"instability": f"instability {labels[1]}"})
    out = left.merge(right, on="pair", how="outer").sort_values("pair").reset_index(drop=True)
    out.insert(1, f"{labels[1]} − {labels[0]}", out[f"instability {labels[1]}"] - out[f"instability {labels[0]}"])
    out["pair"] = out["pair"].str.replace("|", " | ", regex=False)  # a narrow column wraps between the names
    return out


def paired_samples(a: Trajectory, b: Trajectory, labels: tuple[str, str]) -> pd.DataFrame:
    """One row per sample (the same layout in both events): the paired differences B − A of its mean
    segment instability and of its mean flips over free positions first, then the values in A and B
    and the layout."""
    rows, samples = {}, []
    for label, traj in zip(labels, (a, b)):
        event = EventSummary(traj)  # the event's flips counted once for both tables
        seg = segments_table(event).groupby("sample")["instability"].mean()
        samples.append(samples_table(event))
        rows[f"instability {label}"] = seg.reindex(range(traj.n_samples))
        rows[f"flips {label}"] = samples[-1].set_index("sample")["mean_flips_free"].reindex(range(traj.n_samples))
    out = pd.DataFrame(rows)
    out.insert(0, f"instability {labels[1]} − {labels[0]}", out[f"instability {labels[1]}"] - out[f"instability {labels[0]}"])
    out.insert(1, f"flips {labels[1]} − {labels[0]}", out[f"flips {labels[1]}"] - out[f"flips {labels[0]}"])
    out["layout"] = samples[0]["anchor_layout"].to_numpy()
    return out.rename_axis("sample").reset_index()


def difference_title(run_id: str, labels: tuple[str, str]) -> str:
    """The difference map's title: the run on a line of its own, then what is drawn (on one line,
    "run … · flip difference (contradictory − benign), samples flipping per step" ran past a 420 px
    screen's figure; the colour bar says the samples flipping)."""
    run = f"{run_label(run_id).removesuffix(' · ')}<br>" if run_id else ""
    return f"{run}flip difference ({labels[1]} − {labels[0]})"


def summary_line(paired: pd.DataFrame, labels: tuple[str, str]) -> str:
    """The mean paired difference of per-sample instability and how many samples went each way."""
    diff = paired[f"instability {labels[1]} − {labels[0]}"].dropna()
    if diff.empty:
        return "No sample has a measured segment in both events."
    return (f"Paired difference of per-sample instability ({labels[1]} − {labels[0]}): mean {diff.mean():+.4f} over "
            f"{counted(len(diff), 'sample')}; {labels[1]} higher in {int((diff > 0).sum())}, lower in {int((diff < 0).sum())}, "
            f"equal in {int((diff == 0).sum())}.")


class CompareController:
    """The Compare tab's handler (kept apart from the layout so it can be called directly)."""

    def __init__(self, service: PetriService, dish: DishController):
        self.service = service
        self.dish = dish
        self.trajectories = [TrajectoryView(service, dish.tokens, f"traj_{x}") for x in "ab"]
        #: the served family's setting controls: the steps (input 8), then the others after the shuffle box
        self.steps_name = control_of(dish.defaults, "max_denoising_steps")
        self.setting_names = tuple(n for n in dish.setting_names if n != self.steps_name)
        self.input_of_field = {**self.INPUT_OF_FIELD, **settings_inputs(dish.defaults, 11, skip=(self.steps_name,))}

    #: The index of each input (in :meth:`run`'s order) that holds a request field, for the validator
    #: (the sampler settings but the steps follow the slot table and shuffle box, :attr:`input_of_field`).
    INPUT_OF_FIELD = {
        "concepts": 0, "labels": 3, "template": 5, "samples": 6, "seed": 7, "max_denoising_steps": 8, "positions": 9,
        "shuffle": 10,
    }
    #: The inputs holding the two events (``events.0`` and ``events.1`` of the request).
    EVENT_INPUTS = (2, 4)

    def request_of(self, concepts, label_a, event_a, label_b, event_b, template, samples, seed, steps, placement=None,
                   shuffle=True, *settings):
        """The labels and the ``POST /api/seed`` request (two events) the inputs stand for
        (``settings``: the served family's setting controls but the steps, in :attr:`setting_names`'
        order); raises pydantic's ``ValidationError`` or a :class:`FieldError` (the two labels the same)."""
        labels = ((label_a or "A").strip() or "A", (label_b or "B").strip() or "B")
        if labels[0] == labels[1]:
            raise FieldError(["labels"], "give the two events different labels")
        values = {self.steps_name: steps, **dict(zip(self.setting_names, settings))}
        request = self.dish.request_of(
            concepts, None, template, samples, seed, placement, shuffle, values,
            events=[{"event": event_a, "group": labels[0]}, {"event": event_b, "group": labels[1]}])
        return labels, request

    def validate(self, *inputs) -> list[dict]:
        """Gradio validator: one ``gr.validate`` per input of :meth:`run`, the bad ones carrying the
        message of ``POST /api/seed``'s checks, so the UI marks the field itself (and refuses the
        run before it is queued)."""
        return self.dish.seed_validation(len(inputs), lambda: self.request_of(*inputs)[1], self.input_of_field,
                                         self.EVENT_INPUTS)

    def run(self, concepts, label_a, event_a, label_b, event_b, template, samples, seed, steps, placement=None,
            shuffle=True, *settings, cancel: threading.Event | None = None, caller: Caller | None = None):
        """Generator: check (:meth:`request_of`, then ``POST /api/seed``'s checks; the slots, shuffle
        and sampler settings as the Dish tab reads them, a setting left ``None`` the model's default),
        sample both events in one run while each event's flip map is redrawn live, then yield every view."""
        try:
            labels, request = self.request_of(concepts, label_a, event_a, label_b, event_b, template, samples, seed,
                                              steps, placement, shuffle, *settings)
            request, plan, capped = capped_seed(request, self.service.lm)  # ZeroGPU: capped to one call
        except (ValidationError, FieldError) as err:
            raise gr.Error(request_error_message(err), title="Check the comparison") from None
        yield {"status": QUEUED_LINE if self.service.busy else " ".join(filter(None, ("Sampling both events…", capped))),
               "heatmap_a": None, "heatmap_b": None, "difference": None, "summary": "",
               "sample": gr.update(value=0, maximum=1, interactive=False)}
        lives = [LiveDish(self.service.lm, self.dish.tokens, planned) for planned in plan.events]

        def take(payload) -> None:  # (event, LiveStep)
            lives[payload[0]].add(payload[1])

        def submit(emit):
            sampling = [0]  # on the job's thread: the event whose steps come now (the service says when it starts)

            def set_event(index: int) -> None:
                sampling[0] = index

            return self.service.submit_seed(plan, owner=caller.owner if caller else None,
                                            watch=Watch(on_step=lambda step: emit(sampling[0], step), progress=set_event))

        result = None
        try:
            events = (zerogpu_stream(self.service, plan, caller.owner if caller else None, cancel, with_event=True)
                      if on_zero_gpu() else stream(submit, self.service.jobs, cancel=cancel, idle=True))
            for kind, payload in throttled(events, take):
                if kind == "done":
                    result = payload
                    break
                i, step = payload
                index, finished = step.index, step.finished
                yield {"status": f"Sampling {labels[i]} (event {i + 1} of 2)… step {index + 1} of at most "
                                 f"{plan.settings.max_denoising_steps} ({int(sum(finished))}/{len(finished)} samples settled)",
                       ("heatmap_a", "heatmap_b")[i]: lives[i].heatmap(index, labels[i]),
                       **lives[i].trajectory(self.trajectories[i])}
        except QueueFull as err:
            raise gr.Error(f"The model is busy: {err}", title="Busy") from None
        except (JobCancelled, GpuAborted) as stop:  # an aborted or refused GPU call: its finished event stays stored
            yield {"status": f"Stopped: {stop}."}
            return
        result = cast(SeedResult, result)  # stream() ends with "done" or raises
        a, b = result.trajectories
        yield {**self.views(result.run_id, a, b, labels),
               "status": f"Done: run `{result.run_id}` — {labels[0]} and {labels[1]}, {counted(request.samples, 'sample')} "
                         f"each, seed {request.seed}, {result.wall_s:.2f} s. Stored; also at `/api/runs/{result.run_id}`."}

    def controls_of(self, request: dict, a: Trajectory) -> dict:
        """Every input of the tab set to stored comparison ``request``'s values (``a``: its first
        event's trajectory, for runs stored before the request kept the template, slots and
        shuffle): the Dish tab's shared controls as :meth:`DishController.controls_of` reads them,
        and both events with their labels."""
        first, second = request["events"][:2]
        shared = {k: v for k, v in self.dish.controls_of(request, a).items() if k != "event"}
        return {**shared, "label_a": first.get("group") or "A", "event_a": first["event"],
                "label_b": second.get("group") or "B", "event_b": second["event"]}

    def figures(self, stored: list) -> dict:
        """The tab's figures of a stored comparison (``stored`` as ``load_events`` gives it), for downloads."""
        (_, group_a, a), (_, group_b, b) = stored[:2]
        views = self.views("", a, b, (group_a or "A", group_b or "B"))
        return {"heatmap-a": views["heatmap_a"], "heatmap-b": views["heatmap_b"], "difference": views["difference"]}

    def views(self, run_id: str, a: Trajectory, b: Trajectory, labels: tuple[str, str]) -> dict:
        """Both heatmaps, their difference, the pair and per-sample tables, the texts (also for a
        reopened stored comparison)."""
        counts = [flip_grid(t.argmax, t.steps, t.anchor_mask).sum(axis=0) for t in (a, b)]
        paired = paired_samples(a, b, labels)
        heat_a, heat_b = self.dish.final_heatmap(a, run_id), self.dish.final_heatmap(b, run_id)  # each names its run
        heat_a.update_layout(title_text=f"{labels[0]}: {heat_a.layout.title.text}")
        heat_b.update_layout(title_text=f"{labels[1]}: {heat_b.layout.title.text}")
        steps = max(int(a.steps.max()), int(b.steps.max()), 1)  # one step axis (and height) for both maps
        for fig in (heat_a, heat_b):
            fig.update_yaxes(range=[steps - 0.5, -0.5], autorange=False)
            fig.update_layout(height=max(400, min(900, 12 * steps + 160)))
        concepts = concept_colors(sorted({s.concept for s in a.anchors[0]}))
        layout_note = ("same layouts and seed in both events" if same_layouts(a, b)
                       else "**the layouts differ between the events** (not a paired comparison)")
        return {
            "run_id": run_id,
            "heatmap_a": heat_a,
            "heatmap_b": heat_b,
            "difference": title_at_top(flip_difference_heatmap(
                counts[0], counts[1], labels=labels, anchors=aggregate_anchor_boxes(a.anchors), pinned=a.anchor_mask.all(axis=0),
                n_samples=a.n_samples, title=difference_title(run_id, labels), colors=concepts)),
            "pairs": compare_pairs(a, b, labels).round(4),
            "paired": paired.round(4),
            "summary": f"{f'Run `{run_id}`: ' if run_id else ''}{summary_line(paired, labels)} "
                       f"{paired_tests_line(a, b, labels)} ({layout_note}.)",
            "sample": gr.update(maximum=max(a.n_samples - 1, 1), value=0, interactive=a.n_samples > 1),
            **self.sample_views(run_id, a, b, labels, 0),
        }

    def sample_views(self, run_id: str, a: Trajectory, b: Trajectory, labels: tuple[str, str], sample: int,
                     modes: tuple[str, str] = ("canvas", "canvas")) -> dict:
        """Both events' final text and trajectory at sample ``sample`` (the tab's one sample selector:
        a text and the trajectory beside it always show the same sample); ``modes``: what each
        viewer's cells show."""
        sample = min(max(int(sample), 0), a.n_samples - 1)
        concepts = concept_colors(sorted({s.concept for s in a.anchors[0]}))
        views = {}
        for name, traj, label in (("text_a", a, labels[0]), ("text_b", b, labels[1])):
            pieces = highlighted_text(traj, sample, self.dish.tokens)
            # the end-of-turn chip only where the text has such a token (a chip for nothing misleads)
            ends = {END_TOKEN_LABEL: END_TOKEN_COLOR} if any(kind == END_TOKEN_LABEL for _, kind in pieces) else {}
            views[name] = gr.update(value=pieces, color_map={**concepts, **ends}, label=f"{label}: sample {sample}")
        for i, (view, traj, label) in enumerate(zip(self.trajectories, (a, b), labels)):
            views.update(view.views(run_id, i, traj, sample, title=f"{label}: ", mode=modes[i]))
            views.pop(view.name("sample"))
        return views

    def show_sample(self, run_id: str, sample, modes: tuple[str, str], caller: Caller | None = None) -> dict:
        """Sample ``sample`` of a stored comparison in both texts and both viewers (the sample
        selector), if ``caller`` (None: local) may open the run."""
        if not run_id:
            return {}
        UiAccess.open_run(self.service, caller or Caller(public=False), run_id)
        stored = self.service.load_events(run_id)
        if len(stored) < 2:
            return {}
        (_, group_a, a), (_, group_b, b) = stored[:2]
        return self.sample_views(run_id, a, b, (group_a or "A", group_b or "B"), int(sample or 0), modes)


def build_compare_tab(service: PetriService, dish: DishController, access: UiAccess | None = None
                      ) -> tuple[CompareController, dict]:
    """The Compare tab's components and events (inside an open ``gr.Tab``); returns the controller
    and its result components by name (the Runs tab reopens a stored comparison into them)."""
    ctl = CompareController(service, dish)
    gr.Markdown("Two events on the same concepts, anchor layouts and seed: where does the second one make the "
                "model struggle more? Sample *s* of both events has the same layout, so the per-sample "
                "differences are paired.")
    concepts = gr.Textbox(EXAMPLE_CONCEPTS, label="Concepts (2–8, comma-separated)", elem_id="petri-cmp-concepts")
    with gr.Row():
        with gr.Column():
            label_a = gr.Textbox(EXAMPLE_A[0], label="Label A")
            event_a = gr.Textbox(EXAMPLE_A[1], label="Event A", lines=2, elem_id="petri-cmp-event-a")
        with gr.Column():
            label_b = gr.Textbox(EXAMPLE_B[0], label="Label B")
            event_b = gr.Textbox(EXAMPLE_B[1], label="Event B", lines=2, elem_id="petri-cmp-event-b")
    with gr.Row():
        with gr.Column(scale=3):
            template = gr.Dropdown(TEMPLATE_CHOICES, value=DEFAULT_TEMPLATE, allow_custom_value=True,
                                   label="Prompt template ({event}, {concepts})")
        with gr.Column(scale=2):
            slots = placement_controls(dish, EXAMPLE_CONCEPTS, "petri-cmp")
    canvas = chip_canvas(dish, EXAMPLE_CONCEPTS, "petri-cmp")
    with gr.Row():
        samples = gr.Slider(1, MAX_SAMPLES, value=8, step=1, label="Samples per event", elem_id="petri-cmp-samples")
        seed = gr.Number(0, precision=0, minimum=0, label="Seed")
    settings = sampler_settings(dish.defaults, "petri-cmp")
    # in the order of CompareController.run's inputs
    controls = {"concepts": concepts, "label_a": label_a, "event_a": event_a, "label_b": label_b, "event_b": event_b,
                "template": template, "samples": samples, "seed": seed, ctl.steps_name: settings[ctl.steps_name],
                "placement": slots["placement"], "shuffle": slots["shuffle"],
                **{k: v for k, v in settings.items() if k != ctl.steps_name}}
    cost_box(list(controls.values()), lambda *values: seed_cost(ctl.request_of(*values)[1], service.lm), "petri-cmp-cost")
    with gr.Row():
        run_btn = gr.Button("Compare the two events", variant="primary", elem_id="petri-cmp-run", scale=4)
        cancel_btn = gr.Button("Cancel", variant="stop", elem_id="petri-cmp-cancel", scale=1)
    status = gr.Markdown("", elem_id="petri-cmp-status")
    summary = gr.Markdown("", elem_id="petri-cmp-summary")
    run_id = gr.State("")
    with gr.Row():
        heatmap_a = gr.Plot(show_label=False, elem_id="petri-cmp-heatmap-a", min_width=320)
        heatmap_b = gr.Plot(show_label=False, elem_id="petri-cmp-heatmap-b", min_width=320)
    difference = gr.Plot(show_label=False, elem_id="petri-cmp-difference")
    add_figure_downloads(service, run_id, ctl.figures, access, (), "petri-cmp-figures")
    # one table above the other, each the page's width: side by side, the paired table's differences
    # were off-screen at 1440 px; empty until a run, with the columns a run fills in under the labels A and B
    with gr.Column():
        pairs = gr.Dataframe(pd.DataFrame(columns=["pair", "B − A", "instability A", "instability B"]),
                             label="Pair instability side by side", interactive=False, elem_id="petri-cmp-pairs",
                             min_width=320, wrap=True, column_widths=PAIRS_WIDTHS)
        paired = gr.Dataframe(pd.DataFrame(columns=["sample", "instability B − A", "flips B − A", "instability A",
                                                    "flips A", "instability B", "flips B", "layout"]),
                              label="Paired difference per sample (same layout in both events)", interactive=False,
                              elem_id="petri-cmp-paired", min_width=320, wrap=True, column_widths=PAIRED_WIDTHS)
    # one sample selector for both texts and both trajectories: each shows the sample it names
    sample = gr.Slider(0, 1, value=0, step=1, label="Sample (numbered from 0): both events' final text and trajectory",
                       interactive=False, elem_id="petri-cmp-sample")
    with gr.Row():
        text_a = gr.HighlightedText(label="A: sample 0", combine_adjacent=True, show_legend=True, min_width=320,
                                    elem_id="petri-cmp-text-a", elem_classes=["petri-text"])
        text_b = gr.HighlightedText(label="B: sample 0", combine_adjacent=True, show_legend=True, min_width=320,
                                    elem_id="petri-cmp-text-b", elem_classes=["petri-text"])
    trajectories = {k: v for view, x in zip(ctl.trajectories, "AB")
                    for k, v in view.build(f"Event {x}'s trajectory", access, sample_selector=False,
                                           empty_note="No trajectory yet: compare the two events.").items()}
    names = {"status": status, "summary": summary, "run_id": run_id, "heatmap_a": heatmap_a, "heatmap_b": heatmap_b,
             "difference": difference, "pairs": pairs, "paired": paired, "text_a": text_a, "text_b": text_b,
             "sample": sample, **trajectories}

    wire_placement(dish, concepts, slots, canvas, settings[control_of(dish.defaults, "pin_thought_channel")])
    wire_run(run_btn, cancel_btn, ctl.run, list(controls.values()), names, access, busy=lambda: service.busy,
             validator=ctl.validate, concurrency_limit=1, concurrency_id="model", show_progress="minimal")
    views = [trajectories[v.name("view")] for v in ctl.trajectories]
    shown = [text_a, text_b, *(trajectories[v.name(p)] for v in ctl.trajectories for p in ("view", "key", "figure", "curves", "files"))]

    def sample_handler(request: gr.Request, rid, s, view_a, view_b):
        update = ctl.show_sample(rid, s, (mode_of(view_a), mode_of(view_b)), cast(UiAccess, access).caller(request))
        return {names[k]: v for k, v in update.items()}

    sample.input(sample_handler, [run_id, sample, *views], shown, show_progress="hidden", trigger_mode="always_last")
    return ctl, {**names, **controls}
