"""The Probe tab: what the model believes fills a slot between pinned text (issue 50; the read of
vLLM's structured-diffusion example server, :mod:`petri.engine.probe`).

- **Frame editor**: the prompt, the frame (slots written ``{{name}}``, the rest pinned) drawn on the
  canvas control the Dish tab uses (:mod:`petri.web.ui.widgets.canvas`: grey chips for pinned frame text,
  a coloured chip per slot; the layout follows the frame's text, so a dragged chip goes back and the
  strip says to edit the text), and the questions (name, slot, alternatives, labels, ``ask_if``).
- **Read**: per-slot bars of the alternatives' probabilities, the slot's settling over the steps
  when more than one is read, the answers, the CSV/JSON downloads. A read is a ``probe`` run.
- **Evaluate a labelled set** (a shipped one or an uploaded CSV/JSONL): a ``probe-eval`` job with
  its progress, then the accuracy/calibration summary, the reliability diagram, the predictions
  and their downloads.

Every request is checked by ``POST /api/probe``'s own checks (:mod:`petri.web.api.probe_requests`),
and each run is reopened from the Runs tab (:meth:`ProbeController.reopen`).
"""

from __future__ import annotations

import json
import threading
from typing import cast

import gradio as gr
import pandas as pd
from pydantic import ValidationError

from petri.app.jobs import QueueFull
from petri.app.probe import EvalSettings, ProbeEvalRun
from petri.app.service import BusyError, PetriService
from petri.core.cancel import Cancelled, CancelToken
from petri.core.probe import DEFAULT_MIN_MASS, ORDER_AS_LISTED, ORDER_CYCLIC, ProbeInputError
from petri.core.settings import MAX_SEED
from petri.core.watch import Watch
from petri.engine.probe import plan_probe
from petri.runs.formats import RESULT_TABLES, result_table_bytes
from petri.runs.probe_results import EVAL_KIND, EVAL_TABLES, PROBE_KIND, frame_document
from petri.study.probe.probe_eval import EVAL_ORDER
from petri.study.probe.probe_set import load_labelled_set
from petri.web.access import Caller
from petri.web.api.probe_requests import read_request, shipped_sets
from petri.web.errors import FieldError
from petri.web.gpu_executor import GpuAborted, on_zero_gpu, run_zerogpu_read
from petri.web.ui.access import UiAccess, export_dir
from petri.web.ui.gpu_quota import capped_read, cost_box, read_cost
from petri.web.ui.live import JobCancelled, JobFailed, stream, wire_run
from petri.web.ui.probe_tab.probe_views import (
    ANSWER_COLUMNS,
    ANSWER_WIDTHS,
    PREDICTION_VIEW,
    QUESTION_COLUMNS,
    SUMMARY_VIEW_COLUMNS,
    SUMMARY_VIEW_WIDTHS,
    answer_words,
    answers_table,
    bars_figure,
    frame_canvas,
    predictions_view,
    question_rows,
    questions_of,
    reliability_figure,
    settling_figure,
    summary_view,
)
from petri.web.ui.views import request_error_message
from petri.web.ui.widgets.canvas import canvas_control

EXAMPLE_PROMPT = "Only 90 units are in stock, but a customer ordered 120."
EXAMPLE_FRAME = "Consistent: {{consistent}}"
EXAMPLE_QUESTIONS = [{"name": "consistent", "alternatives": ["yes", "no"]}]
SAMPLE_CHOICES = ["1", "2", "4", "8", "auto"]
ORDER_CHOICES = [ORDER_AS_LISTED, ORDER_CYCLIC, "permutations:6"]
#: what the tab's words mean, one sentence each (docs/probe.md says more)
EXPLAINED = (
    "Ask the model a question without letting it write: the answer is read from its probabilities.\n\n"
    "- **Frame**: the text written on the canvas and pinned there, with a slot for each answer.\n"
    "- **Slot**: one canvas position (`{{name}}` in the frame) left free, where the model's probability over the "
    "question's labels (A, B, …) is read after a few denoising steps from noise.\n"
    "- **Draws**: how many noise canvases are read and averaged; more draws average out the noise the model starts "
    "from.\n"
    "- **Order**: *as_listed* reads the alternatives in the order given; *cyclic* reads every rotation (label A stands "
    "for each alternative in turn) and averages each alternative over them, so a model that always picks the first "
    "label cannot pass that off as an answer.\n"
    "- **Mass**: the share of the model's whole probability that lies on the labels at all; below the least mass "
    "asked, the read gives *no answer*.")
#: How long a read from the UI waits for a job that holds the model (seconds).
UI_WAIT_S = 300.0


def problem_message(err: Exception) -> str:
    """One line naming the bad field of a refused probe request."""
    if isinstance(err, (ValidationError, FieldError)):
        return request_error_message(err)
    return str(err)


class ProbeController:
    """The Probe tab's handlers (kept apart from the layout so they can be called directly)."""

    def __init__(self, service: PetriService):
        self.service = service

    def request_of(self, prompt, instructions, frame, questions, samples, steps, seed, order=ORDER_AS_LISTED,
                   min_mass=DEFAULT_MIN_MASS):
        """The :class:`~petri.core.probe.ProbeRequest` the inputs stand for, checked as
        ``POST /api/probe`` checks a read (pydantic's ``ValidationError``, a :class:`FieldError` or a
        :class:`ProbeInputError`)."""
        return read_request({
            "prompt": prompt or None, "frame": frame or None, "questions": questions_of(questions) or None,
            "instructions": (instructions or "").strip() or None,
            "samples": "auto" if str(samples) == "auto" else int(samples), "steps": int(steps), "seed": int(seed or 0),
            "order": order or ORDER_AS_LISTED, "min_mass": float(DEFAULT_MIN_MASS if min_mass is None else min_mass)})

    def canvas(self, prompt, instructions, frame, questions) -> dict:
        """The canvas control's value for the frame as typed (its error on the strip where the frame
        or the questions cannot be laid out)."""
        try:
            request = self.request_of(prompt or "x", instructions, frame, questions, 1, 1, 0)
        except (ValidationError, FieldError, ProbeInputError) as err:
            return frame_canvas(self.service.lm, None, problem_message(err))
        return frame_canvas(self.service.lm, request)

    def read(self, prompt, instructions, frame, questions, samples, steps, seed, order=ORDER_AS_LISTED,
             min_mass=DEFAULT_MIN_MASS, *,
             cancel: threading.Event | None = None, caller: Caller | None = None):
        """Generator: check, read the slots (the service's lock held, stored as a ``probe`` run),
        then yield every view of the read."""
        try:
            request = self.request_of(prompt, instructions, frame, questions, samples, steps, seed, order, min_mass)
            request, capped = capped_read(self.service.lm, request)  # ZeroGPU: capped to one call
            plan = plan_probe(self.service.lm, request)
        except (ValidationError, FieldError, ProbeInputError) as err:
            raise gr.Error(problem_message(err), title="Check the probe") from None
        yield {"status": " ".join(filter(None, ("Reading the slots…", capped)))}
        token = CancelToken()
        if cancel is not None:  # the Cancel button's event, seen at every step (and while waiting for the model)
            def heartbeat() -> None:  # cancel the token once the stop is set
                if cancel.is_set():
                    token.cancel("cancelled")

            token.heartbeat = heartbeat
        try:
            owner = caller.owner if caller else None
            done = (run_zerogpu_read(self.service, plan, token, owner) if on_zero_gpu()  # one GPU call from here
                    else self.service.probe(plan, watch=Watch(cancel=token), wait_s=UI_WAIT_S, owner=owner))
        except (Cancelled, GpuAborted) as stop:  # an aborted or refused GPU call stores nothing
            yield {"status": f"Stopped: {stop}."}
            return
        except BusyError as err:
            raise gr.Error(f"The model is busy: {err}", title="Busy") from None
        answers = "; ".join(f"{read['question']} = {answer_words(read)}" for read in
                            (r.to_dict() for r in done.result.final().values())) or "none asked"
        yield {**self.read_views(done.run_id, {"read": done.document}, caller),
               "status": f"Done: run `{done.run_id}` — {answers}; {done.wall_s:.2f} s. Stored; also at "
                         f"`/api/runs/{done.run_id}`."}

    def downloads(self, run_id: str, kind: str, results: dict, caller: Caller | None) -> list[str]:
        """The run's tables as CSV (the run tables of its kind, :mod:`petri.runs.formats`) and its
        documents as JSON, written into ``caller``'s download folder, each named by the run."""
        folder = export_dir(caller) / run_id
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for table in (t for t in RESULT_TABLES.values() if t.kind == kind):
            path = folder / f"{run_id}-{table.name}.csv"
            path.write_bytes(b"".join(result_table_bytes(results, table.name, "csv")))
            paths.append(path)
        path = folder / f"{run_id}-{kind}.json"
        path.write_text(json.dumps(results, indent=1), encoding="utf-8")
        return [str(p) for p in [*paths, path]]

    def read_views(self, run_id: str, results: dict, caller: Caller | None = None) -> dict:
        """The views of a read (after a read, and when a stored one is reopened)."""
        document = results["read"]
        return {"run_id": run_id, "bars": bars_figure(document), "settling": settling_figure(document),
                "answers": answers_table(document), "files": self.downloads(run_id, PROBE_KIND, results, caller)}

    def evaluate(self, set_name, upload, samples, steps, repeats, seed, order=EVAL_ORDER, min_mass=DEFAULT_MIN_MASS, *,
                 cancel: threading.Event | None = None, caller: Caller | None = None):
        """Generator: load the labelled set (an uploaded file, else the shipped one named), queue
        its evaluation (a ``probe-eval`` job), report each item, then yield the report."""
        try:
            labelled = load_labelled_set(upload) if upload else load_labelled_set(shipped_sets()[set_name])
        except KeyError:
            raise gr.Error(f"set: no shipped labelled set is called {set_name!r}", title="Check the set") from None
        except ProbeInputError as err:
            raise gr.Error(problem_message(err), title="Check the set") from None
        settings = EvalSettings(samples="auto" if str(samples) == "auto" else int(samples), steps=int(steps),
                                seed=int(seed or 0), repeats=int(repeats), order=order or EVAL_ORDER,
                                min_mass=float(DEFAULT_MIN_MASS if min_mass is None else min_mass))
        yield {"status": f"Evaluating {labelled.name}: {len(labelled.items)} items × {settings.repeats}…"}

        def submit(emit):
            return self.service.submit_probe_eval(labelled, settings, owner=caller.owner if caller else None,
                                                  on_item=lambda done, total: emit(done, total))

        result = None
        try:
            for kind, payload in stream(submit, self.service.jobs, cancel=cancel):
                if kind == "done":
                    result = payload
                    break
                done, total = payload
                yield {"status": f"Evaluating {labelled.name}… item {done} of {total}"}
        except ProbeInputError as err:
            raise gr.Error(problem_message(err), title="Check the set") from None
        except QueueFull as err:
            raise gr.Error(f"The model is busy: {err}", title="Busy") from None
        except JobCancelled as stop:
            yield {"status": f"Stopped: {stop}."}
            return
        except JobFailed as err:
            raise gr.Error(f"The evaluation failed: {err}") from None
        result = cast(ProbeEvalRun, result)  # stream() ends with "done" or raises
        results = {name: frame_document(getattr(result.evaluation, name)) for name in EVAL_TABLES}
        yield {**self.eval_views(result.run_id, results, caller),
               "status": f"Done: run `{result.run_id}` — {labelled.name}, {result.wall_s:.1f} s. Stored; also at "
                              f"`/api/runs/{result.run_id}`."}

    def eval_views(self, run_id: str, results: dict, caller: Caller | None = None) -> dict:
        """The views of an evaluation (after a run, and when a stored one is reopened)."""
        tables = {name: pd.concat(list(RESULT_TABLES[name].chunks(results)), ignore_index=True) for name in EVAL_TABLES}
        return {"eval_run_id": run_id, "summary": summary_view(tables["summary"]),
                "reliability": reliability_figure(tables["reliability"]),
                "predictions": predictions_view(tables["predictions"]),
                "eval_files": self.downloads(run_id, EVAL_KIND, results, caller)}

    def controls_of(self, request: dict) -> dict:
        """The read's inputs set back to a stored read's request."""
        return {"prompt": request.get("prompt", ""), "instructions": request.get("instructions") or "",
                "frame": request.get("frame", ""), "questions": question_rows(request.get("questions", [])),
                "samples": str(request.get("samples", 1)), "steps": int(request.get("steps", 1)),
                "seed": int(request.get("seed", 0)), "order": request.get("order", ORDER_AS_LISTED),
                "min_mass": float(request.get("min_mass", DEFAULT_MIN_MASS))}

    def reopen(self, run: dict, caller: Caller | None = None) -> dict:
        """A stored probe run's views (a read with its inputs set back, or an evaluation)."""
        results = self.service.load_results(run["run_id"])
        if not results:
            raise gr.Error(f"run {run['run_id']} ({run['status']}) stored no result to show", title="Runs")
        if run["kind"] == EVAL_KIND:
            return self.eval_views(run["run_id"], results, caller)
        request = results["read"]["request"]
        controls = self.controls_of(request)
        canvas = self.canvas(controls["prompt"], controls["instructions"], controls["frame"], controls["questions"])
        return {**self.read_views(run["run_id"], results, caller), **controls, "canvas": canvas}


def build_probe_tab(service: PetriService, access: UiAccess | None = None) -> tuple[ProbeController, dict]:
    """The Probe tab's components and events (inside an open ``gr.Tab``); returns the controller and
    its components by name (the Runs tab reopens a stored probe run into them)."""
    ctl = ProbeController(service)
    gr.Markdown(EXPLAINED, elem_id="petri-probe-explained")
    with gr.Row():
        prompt = gr.Textbox(EXAMPLE_PROMPT, label="Prompt (the input the model reads)", lines=2, scale=3,
                            min_width=320, elem_id="petri-probe-prompt")
        instructions = gr.Textbox("", label="Instructions (one line before the prompt; optional)", scale=2,
                                  min_width=320, elem_id="petri-probe-instructions")
    frame = gr.Textbox(EXAMPLE_FRAME, label="Frame (slots as {{name}}; the rest is pinned)", elem_id="petri-probe-frame")
    canvas = canvas_control(ctl.canvas(EXAMPLE_PROMPT, "", EXAMPLE_FRAME, question_rows(EXAMPLE_QUESTIONS)),
                            elem_id="petri-probe-canvas")
    questions = gr.Dataframe(pd.DataFrame(question_rows(EXAMPLE_QUESTIONS), columns=QUESTION_COLUMNS),
                             headers=QUESTION_COLUMNS, datatype=["str"] * 5, interactive=True, wrap=True,
                             column_widths=["140px", "140px", "260px", "140px", "180px"],
                             label="Questions (alternatives and labels comma-separated; ask_if as question=alternative)",
                             elem_id="petri-probe-questions")
    with gr.Row():
        samples = gr.Dropdown(SAMPLE_CHOICES, value="1", label="Noise draws", elem_id="petri-probe-samples")
        steps = gr.Slider(1, 8, value=1, step=1, label="Denoising steps read", elem_id="petri-probe-steps")
        seed = gr.Number(0, precision=0, minimum=0, maximum=MAX_SEED, label="Seed", elem_id="petri-probe-seed")
    with gr.Row():
        order = gr.Dropdown(ORDER_CHOICES, value=ORDER_AS_LISTED, allow_custom_value=True, label="Order of the "
                            "alternatives (permutations:N, N 2-32)", elem_id="petri-probe-order")
        min_mass = gr.Number(DEFAULT_MIN_MASS, minimum=0, maximum=1, step=0.05, label="Least mass on the labels for "
                             "an answer (0-1)", elem_id="petri-probe-min-mass")
    cost_box([prompt, instructions, frame, questions, samples, steps, seed, order, min_mass],
             lambda *values: read_cost(service.lm, ctl.request_of(*values)), "petri-probe-cost")
    with gr.Row():
        run_btn = gr.Button("Read the slots", variant="primary", scale=4, elem_id="petri-probe-run")
        cancel_btn = gr.Button("Cancel", variant="stop", scale=1, elem_id="petri-probe-cancel")
    status = gr.Markdown("", elem_id="petri-probe-status")
    run_id = gr.State("")
    bars = gr.Plot(show_label=False, elem_id="petri-probe-bars")
    settling = gr.Plot(show_label=False, elem_id="petri-probe-settling")
    answers = gr.Dataframe(pd.DataFrame(columns=ANSWER_COLUMNS), label="Answers (each with the share of the model's "
                           "probability on its labels)", interactive=False, wrap=True, column_widths=ANSWER_WIDTHS,
                           elem_id="petri-probe-answers")
    files = gr.File(label="Downloads (reads.csv, top_k.csv, the read as JSON)", file_count="multiple",
                    interactive=False, elem_id="petri-probe-files")

    with gr.Accordion("Evaluate a labelled set", open=False, elem_id="petri-probe-eval"):
        sets = list(shipped_sets())
        with gr.Row():
            set_name = gr.Dropdown(sets, value=sets[0] if sets else None, label="Shipped labelled set", scale=2,
                                   elem_id="petri-probe-set")
            upload = gr.File(label="…or upload one (.csv or .jsonl)", file_types=[".csv", ".jsonl"], type="filepath",
                             scale=2, elem_id="petri-probe-upload")
        with gr.Row():
            eval_samples = gr.Dropdown(SAMPLE_CHOICES, value="1", label="Noise draws")
            eval_steps = gr.Slider(1, 8, value=1, step=1, label="Steps")
            repeats = gr.Slider(1, 10, value=1, step=1, label="Repeats (repeatability)")
            eval_seed = gr.Number(0, precision=0, minimum=0, maximum=MAX_SEED, label="Seed")
        with gr.Row():
            eval_order = gr.Dropdown(ORDER_CHOICES, value=EVAL_ORDER, allow_custom_value=True, label="Order of the "
                                     "alternatives", elem_id="petri-probe-eval-order")
            eval_min_mass = gr.Number(DEFAULT_MIN_MASS, minimum=0, maximum=1, step=0.05, label="Least mass on the "
                                      "labels for an answer (0-1)", elem_id="petri-probe-eval-min-mass")
        with gr.Row():
            eval_btn = gr.Button("Evaluate", variant="primary", scale=4, elem_id="petri-probe-eval-run")
            eval_cancel = gr.Button("Cancel", variant="stop", scale=1, elem_id="petri-probe-eval-cancel")
        eval_status = gr.Markdown("", elem_id="petri-probe-eval-status")
        eval_run_id = gr.State("")
        summary = gr.Dataframe(pd.DataFrame(columns=SUMMARY_VIEW_COLUMNS), label="Per question, with 95 % Wilson "
                               "intervals: how many were answered, accuracy over the answered and with no answer "
                               "counted wrong, how often the first listed alternative was answered against how often "
                               "it is the gold answer, the accuracy of always giving the commonest gold answer",
                               interactive=False, wrap=True, column_widths=SUMMARY_VIEW_WIDTHS,
                               elem_id="petri-probe-summary")
        reliability = gr.Plot(show_label=False, elem_id="petri-probe-reliability")
        predictions = gr.Dataframe(pd.DataFrame(columns=list(PREDICTION_VIEW.values())), label="Predictions per item "
                                   "(p: the answer's share of the labels' probability; mass: the model's probability "
                                   "on the labels; the downloads hold every column)", interactive=False, wrap=True,
                                   max_height=400, elem_id="petri-probe-predictions")
        eval_files = gr.File(label="Downloads (predictions, summary, reliability as CSV; the evaluation as JSON)",
                             file_count="multiple", interactive=False, elem_id="petri-probe-eval-files")

    read_inputs = {"prompt": prompt, "instructions": instructions, "frame": frame, "questions": questions,
                   "samples": samples, "steps": steps, "seed": seed, "order": order, "min_mass": min_mass}
    names = {"status": status, "run_id": run_id, "bars": bars, "settling": settling, "answers": answers, "files": files}
    eval_names = {"status": eval_status, "eval_run_id": eval_run_id, "summary": summary, "reliability": reliability,
                  "predictions": predictions, "eval_files": eval_files}
    layout_inputs = [prompt, instructions, frame, questions]
    for changed in (frame.change, questions.change, instructions.change):
        changed(ctl.canvas, layout_inputs, canvas, show_progress="hidden")
    canvas.input(ctl.canvas, layout_inputs, canvas, show_progress="hidden")  # the layout follows the text
    wire_run(run_btn, cancel_btn, ctl.read, list(read_inputs.values()), names, access, busy=lambda: service.busy,
             concurrency_limit=1, concurrency_id="model", show_progress="minimal")
    wire_run(eval_btn, eval_cancel, ctl.evaluate, [set_name, upload, eval_samples, eval_steps, repeats, eval_seed,
                                                   eval_order, eval_min_mass],
             eval_names, access, busy=lambda: service.busy, concurrency_limit=1, concurrency_id="model",
             show_progress="minimal")
    return ctl, {**names, **{k: v for k, v in eval_names.items() if k != "status"}, "eval_status": eval_status,
                 **read_inputs, "canvas": canvas}
