"""The Study tab: an editable study (concepts, events with group labels, templates) loaded from a
bundled study file or an upload, run as a job of the service's queue (Cancel stops it within one
step; its stored batches stay), with the figures and statistics redrawn as batches land, then the
study's three figures, the statistics summary and the CSV downloads.

The edited tables become a ``POST /api/study`` body (:class:`~petri.web.api.requests.StudyRequest`)
and go through the API's checks (:func:`~petri.web.api.requests.prepare_study`: the study-file schema,
the text limits, :data:`~petri.web.limits.MAX_STUDY_BATCHES`, prompt length, layouts) and the API's
job (:meth:`~petri.app.service.PetriService.submit_study`, as ``POST /api/jobs/study``; resumable); the numbers come from
:func:`petri.study.results.analysis.analyze`, the figures from :mod:`petri.study.figures.plots` and the files from
:func:`petri.study.results.report.write_study`.
"""

from __future__ import annotations

import re
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import cast

import gradio as gr
import pandas as pd
from pydantic import ValidationError

from petri.app.jobs import QueueFull
from petri.app.service import PetriService
from petri.core.paths import studies_dir
from petri.core.watch import Watch
from petri.core.wording import counted
from petri.study.execution.runner import study_run_id
from petri.study.figures.plots import event_ranking_figure, instability_figure, jaccard_heatmap
from petri.study.results.provisional import BatchReader, provisional_statistics
from petri.study.schema import Study, StudyError, load_study, study_from_dict
from petri.web.access import Caller
from petri.web.api.requests import SettingsIn, StudyRequest, prepare_study
from petri.web.errors import FieldError
from petri.web.gpu_executor import GpuAborted, on_zero_gpu
from petri.web.limits import MAX_SAMPLES, MAX_STEPS
from petri.web.ui.access import UiAccess, export_dir
from petri.web.ui.gpu_quota import capped_study, cost_box, study_cost
from petri.web.ui.live import JobCancelled, JobFailed, field_validation, stream, wire_run, zerogpu_study
from petri.web.ui.study_tab.shipped import load_shipped, report_markdown, shipped_figures, shipped_files, shipped_markdown
from petri.web.ui.study_tab.stats import build_stats_panel, power_cleared, stats_views
from petri.web.ui.study_tab.study_paired import conditions_meta, paired_final_views, paired_live_views, with_conditions
from petri.web.ui.study_tab.study_summary import jaccard_views, mixed_model_lines, statistics_markdown  # noqa: F401 (their home was here)
from petri.web.ui.views import request_error_message, responsive
from petri.web.ui.widgets.figure_files import add_shown_figure_downloads

EVENT_COLUMNS = ["id", "group", "text", "concepts"]
TEMPLATE_COLUMNS = ["id", "text"]
#: Redraw the live study figures at most this often (seconds); every batch updates the status line.
LIVE_STUDY_REDRAW_S = 2.0
#: ...and at most this share of the study's time: the next redraw waits (1 - share) / share times
#: as long as the last one took (so redrawing a large run cannot slow its sampling by more).
LIVE_STUDY_REDRAW_SHARE = 0.2


def redraw_due(now: float, last_draw: float | None, last_cost: float, min_interval: float | None = None,
               share: float | None = None) -> bool:
    """Whether the live study views are due for a redraw at ``now`` (seconds, monotonic), given
    when the last redraw started (``None``: never) and how long it took (``last_cost``); the
    interval and share default to :data:`LIVE_STUDY_REDRAW_S` and :data:`LIVE_STUDY_REDRAW_SHARE`."""
    if last_draw is None:
        return True
    min_interval = LIVE_STUDY_REDRAW_S if min_interval is None else min_interval
    share = LIVE_STUDY_REDRAW_SHARE if share is None else share
    return now - last_draw >= max(min_interval, last_cost * (1.0 - share) / share)


def pending_views(run_id: str, done: int, total: int) -> dict:
    """The views of study run ``run_id`` that only a complete run has (the template-sensitivity
    figure, the downloads, the report), cleared and naming the run, so nothing of another run stays
    on screen; the figures and the statistics are cleared too while no batch is in (``done == 0``)."""
    every = f"all {counted(total, 'batch')}" if total != 1 else "its batch"
    when = f"when {every} of run `{run_id}` {'are' if total != 1 else 'is'} in ({done} so far)"
    views = {
        "jaccard": gr.update(value=None, visible=False),
        "jaccard_note": gr.update(value=f"The template-sensitivity figure of study run `{run_id}` is drawn {when}.",
                                  visible=True),
        "files": gr.update(value=None, label=f"Downloads of run {run_id}: written when {every} {'are' if total != 1 else 'is'} in "
                                             f"({done} so far)"),
        "report": f"The report of study run `{run_id}` is written {when}.",
        "pairs": gr.update(value=None, label=f"Pairs of run {run_id}: tested when {every} {'are' if total != 1 else 'is'} in "
                                             f"({done} so far)"),
        "results_dir": None,  # the power panel has no pilot until the run is complete
        **power_cleared(run_id, f"estimated {when}"),
    }
    if done == 0:
        views.update(instability=None, events=None, groups=gr.update(value=None, label=f"Groups of run {run_id}"),
                     stats=f"**Run `{run_id}`**: no batch is in yet.")
    return views


#: the bundled study the tab opens on: the one whose committed results it shows on top
DEFAULT_STUDY = "inventory_order.json"


def builtin_studies() -> dict[str, Path]:
    """The study files bundled in ``assets/studies`` by file name (a fixed server-side list),
    :data:`DEFAULT_STUDY` first, then by name."""
    folder = studies_dir()
    if not folder.is_dir():
        return {}
    return {p.name: p for p in sorted(folder.glob("*.json"), key=lambda p: (p.name != DEFAULT_STUDY, p.name))}


def study_to_fields(study: Study) -> tuple[dict, str, pd.DataFrame, pd.DataFrame, str, str, list[str]]:
    """(meta, concepts text, events table, templates table, comparison text, show text, template ids)."""
    meta = {"id": study.id, "title": study.title, "language": study.language, "description": study.description,
            **conditions_meta(study)}
    events = pd.DataFrame(
        [[e.id, e.group, e.text, ", ".join(e.concepts) if e.concepts else ""] for e in study.events],
        columns=EVENT_COLUMNS,
    )
    templates = pd.DataFrame([[t.id, t.text] for t in study.templates], columns=TEMPLATE_COLUMNS)
    return (meta, ", ".join(study.concepts), events, templates, ", ".join(study.comparison), ", ".join(study.show),
            [t.id for t in study.templates])


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _rows(table) -> list[list]:
    if table is None:
        return []
    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
    rows = []
    for row in frame.fillna("").astype(str).values.tolist():
        if any(cell.strip() for cell in row):
            rows.append([cell.strip() if i < 2 else cell for i, cell in enumerate(row)])
    return rows


def fields_to_dict(meta: dict | None, concepts: str, events, templates, comparison: str, show: str) -> dict:
    """The edited tables as a study in the study-file schema (what ``POST /api/study`` takes)."""
    meta = meta or {}
    data: dict = {
        "schema": 1,
        "id": meta.get("id") or "ui_study",
        "title": meta.get("title") or "Study from the UI",
        "language": meta.get("language") or "en",
        "description": meta.get("description") or "",
        "concepts": _split(concepts),
        "templates": [{"id": r[0], "text": r[1]} for r in _rows(templates)],
        "events": [],
    }
    for row in _rows(events):
        row = (row + ["", "", "", ""])[:4]
        entry = {"id": row[0], "group": row[1], "text": row[2]}
        if row[3].strip():
            entry["concepts"] = _split(row[3])
        data["events"].append(entry)
    pair = _split(comparison)
    if pair:
        data["comparison"] = {"groups": pair, "show": _split(show)}
    return with_conditions(data, meta)


def fields_to_study(meta: dict | None, concepts: str, events, templates, comparison: str, show: str) -> Study:
    """The edited tables as a validated :class:`Study` (raises :class:`StudyError` naming the entry)."""
    return study_from_dict(fields_to_dict(meta, concepts, events, templates, comparison, show), source="study (UI)")


class StudyController:
    """The Study tab's handlers (kept apart from the layout code so they can be called directly)."""

    def __init__(self, service: PetriService):
        self.service = service
        self.workdir = Path(tempfile.mkdtemp(prefix="petri-study-"))

    def load_builtin(self, name: str):
        """The set-up fields (:meth:`_loaded`) of bundled study ``name``, the Bundled-study box left on it."""
        studies = builtin_studies()
        if name not in studies:
            raise gr.Error(f"study: {name!r} is not a bundled study" if name else "study: choose a bundled study")
        return (*self._loaded(load_study(studies[name]), f"bundled `{name}`"), gr.update())

    def load_upload(self, file):
        """The set-up fields of an uploaded study file, the Bundled-study box emptied (it no longer
        names the study in the set-up)."""
        if not file:
            return [gr.update()] * 9
        path = file if isinstance(file, str) else getattr(file, "name", None)
        try:
            study = load_study(path)
        except StudyError as err:
            raise gr.Error(f"{Path(err.file).name}: {err.entry}: {err.reason}", title="Study file") from None
        return (*self._loaded(study, f"uploaded `{Path(path).name}`"), gr.update(value=None))

    @staticmethod
    def _loaded(study: Study, source: str):
        meta, concepts, events, templates, comparison, show, ids = study_to_fields(study)
        note = (f"Loaded **{study.title}** ({source}) — {counted(len(study.events), 'event')} in groups "
                f"{', '.join(study.groups)}, {counted(len(study.templates), 'template')}.")
        return (meta, concepts, events, templates, comparison, show,
                gr.update(choices=ids, value=ids[:1]), note)

    @staticmethod
    def controls_of(run: dict, study: Study) -> dict:
        """Every input of the tab set to stored study run ``run``'s values (``study``: its study):
        the set-up tables, the templates it ran, samples, seed and steps; Run then resumes it."""
        request = run["request"]
        meta, concepts, events, templates, comparison, show, ids = study_to_fields(study)
        return {
            "meta": meta, "concepts": concepts, "events_table": events, "templates_table": templates,
            "comparison": comparison, "show": show, "template_ids": gr.update(choices=ids, value=list(request["templates"])),
            "samples": int(request["samples"]), "seed": int(request["seed"]),
            "steps": int(request["settings"]["max_denoising_steps"]),
            "loaded": f"Reopened **{study.title}** from run `{run['run_id']}` with its settings: run it again to resume it.",
            "builtin": gr.update(value=None),  # the set-up holds the run's study, not a bundled file
        }

    @staticmethod
    def template_choices(templates, selected):
        """The Templates-to-run box after the user edited the templates table: the table's ids as its
        choices, the ``selected`` ids still there kept (else the first). ``selected`` comes from a
        ``gr.State`` (the server's copy), never from the box itself: the box's value in the browser can
        still be the previous study's while its choices on the server are the new study's, and Gradio
        refuses such a value ("'t1_describe' is not in the list of choices")."""
        ids = [r[0] for r in _rows(templates) if r and r[0]]
        return gr.update(choices=ids, value=[i for i in (selected or []) if i in ids] or ids[:1])

    #: Where a study field's error is shown: the index of the Run input (in :meth:`run`'s order) that
    #: holds the study entry (by its first name; the header's id, title and language, which the tab
    #: does not edit, show on the concept field) or the request field.
    STUDY_INPUTS = {"concepts": 1, "events": 2, "templates": 3, "comparison": 4, "show": 5}
    REQUEST_INPUTS = {"templates": 6, "samples": 7, "seed": 8, "max_denoising_steps": 9}

    def prepare(self, meta, concepts, events, templates, comparison, show, template_ids, samples, seed, steps=None):
        """The checks of ``POST /api/study`` on the tab's inputs (and one template chosen at least):
        ``(request, plan)`` (:class:`~petri.study.plan.StudyPlan`); raises pydantic's ``ValidationError`` or a :class:`FieldError`."""
        if not template_ids:
            raise FieldError(["templates"], "choose at least one template to run")
        request = StudyRequest(
            study=fields_to_dict(meta, concepts, events, templates, comparison, show),
            samples=int(samples or 1), seed=int(seed or 0), templates=list(template_ids),
            settings=SettingsIn(max_denoising_steps=int(steps) if steps else None),
        )
        return request, prepare_study(request, self.service.lm)

    def validate(self, *inputs) -> list[dict]:
        """Gradio validator: one ``gr.validate`` per input of :meth:`run`, the bad ones carrying the
        message of :meth:`prepare`'s checks, so the UI marks the field (and refuses the run before
        it is queued)."""
        def input_of(loc: list, kind: str) -> int:
            if loc and loc[0] == "study":
                entry = cast(re.Match, re.match(r"[A-Za-z_]*", str(loc[1]) if len(loc) > 1 else "")).group()  # * always matches
                return self.STUDY_INPUTS.get(entry, 1)
            return self.REQUEST_INPUTS.get(str(loc[0]) if loc else "", 1)

        return field_validation(len(inputs), lambda: self.prepare(*inputs), input_of)

    def run(self, meta, concepts, events, templates, comparison, show, template_ids, samples, seed, steps=None,
            cancel: threading.Event | None = None, caller: Caller | None = None):
        """Generator: check the study (:meth:`prepare`), run it in a worker thread, and
        after each stored batch redraw the instability figure, the ranked events and the event-level
        test from the batches stored so far (labelled provisional with the events so far), then the
        final figures, statistics, report and files. Yields dicts keyed by output name; ``cancel`` is
        the hook a Cancel button sets (:func:`petri.web.ui.live.stream`)."""
        try:
            request, plan = self.prepare(meta, concepts, events, templates, comparison, show, template_ids, samples,
                                         seed, steps)
        except (ValidationError, FieldError) as err:
            raise gr.Error(request_error_message(err), title="Check the study") from None
        lm = self.service.lm
        study, settings, chosen_ids = plan.study, plan.settings, plan.template_ids
        total = len(study.events) * len(chosen_ids) * max(1, len(study.conditions))
        samples, settings, capped = capped_study(lm, study, plan.templates, plan.samples, settings)  # ZeroGPU: a call a batch
        plan = replace(plan, samples=samples, settings=settings)
        # the id the runner gives this run (it derives it from the same facts), to read its batches live
        run_id = study_run_id(study, lm.model_id, settings, samples, request.seed, chosen_ids,
                              lm.fingerprint(), lm.device_type)
        yield {"status": f"Study run `{run_id}`: " + ("waiting for the model…" if self.service.busy else "starting…")
               + (f" {capped}" if capped else ""), **pending_views(run_id, 0, total)}
        owner = caller.owner if caller else None

        def submit(emit):
            return self.service.submit_study(plan, owner=owner, watch=Watch(progress=emit))

        reader = BatchReader(self.service.store, run_id, study, chosen_ids, request.seed)
        result, last_draw, last_cost = None, None, 0.0
        events = (zerogpu_study(self.service, plan, owner, cancel)
                  if on_zero_gpu() else stream(submit, self.service.jobs, cancel=cancel))
        try:
            for kind, payload in events:
                if kind == "done":
                    result = payload
                    break
                status = (f"Study run `{run_id}`: {payload.done} of {counted(payload.total, 'batch')} — {payload.event_id} / "
                          f"{payload.template_id}" + (" (from the store)" if payload.skipped else ""))
                now = time.monotonic()
                if payload.done < payload.total and redraw_due(now, last_draw, last_cost):
                    views = self.live_views(study, run_id, chosen_ids, settings, request.seed, total, reader)
                    last_draw, last_cost = now, time.monotonic() - now
                    yield {"status": status, **views}
                else:
                    yield {"status": status}
        except QueueFull as err:
            raise gr.Error(f"The model is busy: {err}", title="Busy") from None
        except (JobCancelled, GpuAborted) as stop:  # an aborted or refused GPU call keeps the stored batches too
            yield {**self.live_views(study, run_id, chosen_ids, settings, request.seed, total, reader),
                   "status": f"Study run `{run_id}` stopped ({stop}); its stored batches stay (run it again to resume)."}
            return
        except JobFailed as err:
            raise gr.Error(f"The study failed: {err}") from None
        except (StudyError, ValueError) as err:
            raise gr.Error(str(err)) from None
        yield self.final_views(result, total, caller)

    def final_views(self, result, total: int, caller: Caller | None = None) -> dict:
        """The finished study's figures, statistics, report and files (in ``caller``'s folder; after
        a run, and when a stored study run is reopened)."""
        from petri.runs.export import token_decoder
        from petri.study.results.report import write_study

        study = result.study
        lm = self.service.lm
        decoder = token_decoder(lm.tokenizer, lm.model_id, [b.trajectory for b in result.batches])
        outputs = write_study(result, export_dir(caller) / result.run_id, images=False, token_text=decoder)
        analysis = outputs.analysis
        shown = [*study.comparison, *study.show]
        run_id = result.run_id
        views = {
            "status": f"Done: study run `{run_id}` — final ({len(result.batches)} of {counted(total, 'batch')}).",
            "instability": responsive(instability_figure(analysis.tables["segments"], analysis.events,
                                                         analysis.comparison, shown, model_id=result.model_id,
                                                         run_id=run_id, compact=True)),
            "events": responsive(event_ranking_figure(analysis.events, list(study.groups), model_id=result.model_id,
                                                      run_id=run_id, compact=True)),
            **jaccard_views(analysis.jaccard, run_id, lambda: jaccard_heatmap(
                analysis.jaccard, analysis.jaccard_mean, tagger=analysis.tagger, top_n=analysis.top_n, run_id=run_id,
                compact=True)),
            "stats": "**Final** (every batch is in).\n\n" + statistics_markdown(result, analysis)
                     if analysis.paired is None else "",
            "groups": gr.update(value=analysis.group_summary.round(4), label=f"Groups of run {run_id}"),
            "files": gr.update(value=[str(p) for p in outputs.tables.values()] + [str(outputs.report)],
                               label=f"Downloads of run {run_id} (tidy tables, run.json, report.md)"),
            "report": outputs.report.read_text(encoding="utf-8"),
            **self._named_panel(stats_views(outputs.out_dir), run_id),
        }
        return {**views, **paired_final_views(result, analysis)} if analysis.paired is not None else views

    @staticmethod
    def _named_panel(views: dict, run_id: str) -> dict:
        """The per-pair panel's final views, its table labelled with the run."""
        return {**views, "pairs": gr.update(value=views["pairs"], label=f"Pairs of run {run_id} (pair_tests.csv)")}

    def live_views(self, study: Study, run_id: str, template_ids, settings, seed: int, total: int,
                   reader: BatchReader | None = None, model_id: str | None = None) -> dict:
        """Every view of study run ``run_id`` from its batches stored so far (``reader`` follows a
        run, reading each batch once): the provisional figures, statistics and groups table, and
        the views only a complete run has cleared (:func:`pending_views`), all naming the run."""
        reader = reader or BatchReader(self.service.store, run_id, study, template_ids, seed)
        batches = reader.read()
        views = pending_views(run_id, len(batches), total)
        if not batches:
            return views
        prov = provisional_statistics(study, batches, total, settings.max_denoising_steps, seed=seed,
                                      tables_of=reader.tables)
        model_id = model_id or self.service.model_id
        shown = [*study.comparison, *study.show]
        headline = prov.comparison.event.summary() if prov.comparison is not None else f"not yet — {prov.waiting}"
        label = prov.label()
        paired = paired_live_views(study, prov, label, model_id, run_id) if study.paired else {}
        return {
            **views,
            "instability": responsive(instability_figure(prov.segments, prov.events, prov.comparison, shown,
                                                         model_id=model_id, provisional=label, waiting=prov.waiting,
                                                         run_id=run_id, compact=True)),
            "events": responsive(event_ranking_figure(prov.events, list(study.groups), model_id=model_id,
                                                      provisional=label, run_id=run_id, compact=True)),
            "groups": gr.update(value=prov.groups_table.round(4), label=f"Groups of run {run_id} ({label})"),
            "stats": (f"**Run `{run_id}` — {label}** — provisional numbers, final when every batch is in.\n\n"
                      + (f"> ⚠ {prov.warning}\n\n" if prov.warning else "")
                      + f"**Headline so far (event level):** {headline}"),
            **paired,
        }


def build_study_tab(service: PetriService, access: UiAccess | None = None) -> tuple[StudyController, dict]:
    """The Study tab's components and events (inside an open ``gr.Tab``): the shipped study's
    committed results on top (until a run replaces them), the study set-up, then the run. Returns
    the controller and its result components by name (the Runs tab reopens a stored study into them)."""
    ctl = StudyController(service)
    studies = builtin_studies()
    first = next(iter(studies), None)
    initial = study_to_fields(load_study(studies[first])) if first else (
        {}, "order, inventory, person", pd.DataFrame(columns=EVENT_COLUMNS), pd.DataFrame(columns=TEMPLATE_COLUMNS),
        "", "", [])
    meta0, concepts0, events0, templates0, comparison0, show0, ids0 = initial
    shipped = load_shipped()
    if shipped is not None:
        figures0, stats0 = tuple(responsive(f) for f in shipped_figures(shipped, compact=True)), shipped_markdown(shipped)
        groups0, files0 = pd.DataFrame(shipped.analysis["groups"]).round(4), shipped_files(shipped, ctl.workdir)
        report0 = report_markdown(shipped)
        shown_run = f" of run {shipped.run['run_id']}"
    else:
        figures0, stats0, groups0, files0, report0 = (None, None, None), "", None, None, ""
        shown_run = ""

    gr.Markdown(
        "Compare groups of events (e.g. benign vs contradictory): every event × template is sampled "
        "`samples` times with the concepts shuffled over the slots; the headline test is at the event level "
        "(Mann-Whitney, rank-biserial r with a bootstrap CI), the segment-level test is shown beside it. "
        "While a study runs, the instability figure, the ranked events and the event-level test are redrawn "
        "from the batches stored so far, labelled **provisional** with the events so far."
    )
    meta = gr.State(meta0)
    with gr.Accordion("Study set-up: concepts, events, templates", open=shipped is None):
        with gr.Row():
            builtin = gr.Dropdown(list(studies), value=first, label="Bundled study", scale=2,
                                  elem_id="petri-study-builtin")
            load_btn = gr.Button("Load", size="sm", scale=1)
            upload = gr.File(label="…or upload a study file (.json)", file_types=[".json"], type="filepath", scale=2,
                             elem_id="petri-study-upload")
        loaded = gr.Markdown("", elem_id="petri-study-set-up-note")
        concepts = gr.Textbox(concepts0, label="Concepts (comma-separated)")
        events = gr.Dataframe(events0, headers=EVENT_COLUMNS, datatype=["str", "str", "str", "str"], interactive=True,
                              label="Events (id, group label, text, optional concept subset)", wrap=True,
                              max_height=360, elem_id="petri-study-events")
        templates = gr.Dataframe(templates0, headers=TEMPLATE_COLUMNS, datatype=["str", "str"], interactive=True,
                                 label="Templates ({event}, {concepts})", wrap=True, elem_id="petri-study-templates")
        with gr.Row():
            comparison = gr.Textbox(comparison0, label="Compared groups (reference, comparison)")
            show = gr.Textbox(show0, label="Also show groups")
    template_ids = gr.CheckboxGroup(ids0, value=ids0[:1], label="Templates to run", elem_id="petri-study-template-ids")
    with gr.Row():
        samples = gr.Slider(1, MAX_SAMPLES, value=4, step=1, label="Samples per event × template",
                            elem_id="petri-study-samples")
        seed = gr.Number(0, precision=0, minimum=0, label="Seed", elem_id="petri-study-seed")
        steps = gr.Slider(1, MAX_STEPS, value=service.default_settings().max_denoising_steps, step=1,
                          label="Max denoising steps", elem_id="petri-study-steps")
    run_inputs = [meta, concepts, events, templates, comparison, show, template_ids, samples, seed, steps]
    cost_box(run_inputs, lambda *values: study_cost(service.lm, *ctl.prepare(*values)), "petri-study-cost")
    with gr.Row():
        run_btn = gr.Button("Run the study", variant="primary", elem_id="petri-study-run", scale=4)
        cancel_btn = gr.Button("Cancel", variant="stop", elem_id="petri-study-cancel", scale=1)
    status = gr.Markdown("", elem_id="petri-study-status")
    stats = gr.Markdown(stats0, elem_id="petri-study-stats")
    fig_instability = gr.Plot(figures0[0], show_label=False, elem_id="petri-study-instability")
    fig_events = gr.Plot(figures0[1], show_label=False, elem_id="petri-study-events-fig")
    fig_jaccard = gr.Plot(figures0[2], show_label=False, elem_id="petri-study-jaccard")
    jaccard_note = gr.Markdown("", visible=False, elem_id="petri-study-jaccard-note")
    add_shown_figure_downloads({"instability": fig_instability, "events": fig_events, "jaccard": fig_jaccard},
                               access, "petri-study-figures")
    groups = gr.Dataframe(groups0, label=f"Groups{shown_run}", interactive=False, elem_id="petri-study-groups")
    files = gr.File(files0, label=f"Downloads{shown_run} (tidy tables, run.json, report.md)", file_count="multiple",
                    interactive=False, elem_id="petri-study-files")
    with gr.Accordion("Report (report.md)", open=False):
        report = gr.Markdown(report0, elem_id="petri-study-report")
    panel = build_stats_panel(shipped.folder if shipped is not None else None)  # per-pair tests, power

    fields = [meta, concepts, events, templates, comparison, show, template_ids, loaded, builtin]
    load_btn.click(ctl.load_builtin, builtin, fields)
    upload.upload(ctl.load_upload, upload, fields)
    # A load, an upload and a reopen set the box's choices and value together; only a user's edit of the
    # table (input, not change) recomputes them, from the server's copy of the selection (chosen).
    chosen = gr.State(ids0[:1])
    template_ids.change(lambda ids: ids, template_ids, chosen, show_progress="hidden", queue=False)
    templates.input(ctl.template_choices, [templates, chosen], template_ids, show_progress="hidden")
    names = {"status": status, "instability": fig_instability, "events": fig_events, "jaccard": fig_jaccard,
             "jaccard_note": jaccard_note, "stats": stats, "groups": groups, "files": files, "report": report, **panel}

    wire_run(run_btn, cancel_btn, ctl.run, run_inputs,
             names, access, busy=lambda: service.busy, validator=ctl.validate, mark_fields=False,  # see wire_run
             concurrency_limit=1, concurrency_id="model", show_progress="minimal")
    controls = {"meta": meta, "concepts": concepts, "events_table": events, "templates_table": templates,
                "comparison": comparison, "show": show, "template_ids": template_ids, "samples": samples, "seed": seed,
                "steps": steps, "loaded": loaded, "builtin": builtin}
    return ctl, {**names, **controls}
