"""The Runs tab: the stored runs (dish, comparison and study; newest first; model, concepts, time),
from which a run reopens in its own tab with its heatmap, texts, tables and downloads, read from the
run store (:class:`~petri.store.RunStore`): nothing is sampled again. A study run that did not
finish reopens with the provisional statistics of its stored batches.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from petri.service import PetriService
from petri.store import check_run_id
from petri.study.provisional import stored_batches
from petri.study.runner import StudyResult
from petri.study.schema import StudyError, study_from_dict
from petri.trajectory import SamplerSettings

RUN_COLUMNS = ["run_id", "kind", "created_at", "status", "model", "concepts", "what"]
#: Where each kind of run reopens (the tab ids of :func:`petri.web.ui.build_ui`).
TAB_OF_KIND = {"dish": "dish", "compare": "compare", "study": "study"}


def run_kind(run: dict) -> str:
    """``"study"``, ``"compare"`` (a seed run of two events) or ``"dish"``."""
    if run["kind"] == "study":
        return "study"
    return "compare" if len(run["request"].get("events", [])) == 2 else "dish"


def run_row(run: dict) -> list:
    """One row of the runs table: id, kind, time, status, model, concepts, what was run."""
    request, kind = run["request"], run_kind(run)
    if kind == "study":
        study = request.get("study", {})
        concepts = study.get("concepts", [])
        what = (f"{study.get('title', study.get('id', ''))}: {len(study.get('events', []))} events × "
                f"{len(request.get('templates', []))} templates × {request.get('samples')} samples")
    else:
        events = request.get("events", [])
        concepts = events[0]["concepts"] if events else []
        what = " vs ".join(f"{e.get('group') or ''}{': ' if e.get('group') else ''}{e['event'][:60]}" for e in events)
        what += f" ({request.get('n_samples')} samples, seed {request.get('seed')})"
    return [run["run_id"], kind, run["created_at"], run["status"], run["model_id"], ", ".join(concepts), what]


def runs_table(service: PetriService, limit: int = 200) -> pd.DataFrame:
    """The stored runs, newest first."""
    return pd.DataFrame([run_row(r) for r in service.store.list_runs(limit)], columns=RUN_COLUMNS)


def study_result_from_store(service: PetriService, run: dict) -> tuple[StudyResult, int]:
    """A stored study run as the runner's result (its stored batches), and how many batches it plans."""
    request = run["request"]
    study = study_from_dict(request["study"], source=request.get("study_file") or "study (stored run)")
    template_ids = tuple(request["templates"])
    batches = stored_batches(service.store, run["run_id"], study, template_ids, int(request["seed"]))
    if not batches:
        raise ValueError(f"study run {run['run_id']} has no stored batch yet")
    result = StudyResult(
        study=study, run_id=run["run_id"], model_id=run["model_id"],
        model_fingerprint=request.get("model_fingerprint", ""), settings=SamplerSettings(**request["settings"]),
        samples=int(request["samples"]), seed=int(request["seed"]), template_ids=template_ids, batches=batches,
        computed=0, resumed=len(batches), store_path=str(service.store.path), started_at=run["created_at"],
        finished_at=run["finished_at"] or "", wall_s=0.0, device=batches[0].trajectory.device,
    )
    return result, len(study.events) * len(template_ids)


class RunsController:
    """Reopens a stored run into the Dish, Compare or Study tab's views."""

    def __init__(self, service: PetriService, dish, compare, study):
        self.service, self.dish, self.compare, self.study = service, dish, compare, study

    def open(self, run_id: str) -> tuple[str, str, dict]:
        """(kind, status line, the views of that kind by name) of stored run ``run_id``."""
        try:
            run = self.service.store.get_run(check_run_id((run_id or "").strip()))
        except ValueError as err:
            raise gr.Error(str(err), title="Runs") from None
        if run is None:
            raise gr.Error(f"run_id: no stored run {run_id!r}", title="Runs")
        kind = run_kind(run)
        note = f"Reopened {kind} run `{run['run_id']}` ({run['status']}, {run['created_at']}) from the store; nothing was sampled."
        if kind == "study":
            try:
                result, total = study_result_from_store(self.service, run)
            except (StudyError, ValueError) as err:
                raise gr.Error(f"cannot reopen study run {run['run_id']}: {err}", title="Runs") from None
            if len(result.batches) == total and run["status"] == "done":
                return kind, note, self.study.final_views(result, total)
            views = self.study.live_views(result.study, result.run_id, result.template_ids, result.settings,
                                          result.seed, total)
            return kind, note, views
        stored = self.service.store.load_events(run["run_id"])
        if not stored:
            raise gr.Error(f"run {run['run_id']} has no stored event", title="Runs")
        trajectories = [traj for _, _, traj in stored]
        groups = [group for _, group, _ in stored]
        if kind == "compare" and len(trajectories) == 2:
            labels = (groups[0] or "A", groups[1] or "B")
            return kind, note, self.compare.views(run["run_id"], trajectories[0], trajectories[1], labels)
        return kind, note, self.dish.result_views(run["run_id"], trajectories, groups)


def build_runs_tab(service: PetriService, tabs: gr.Tabs, runs: RunsController, outputs: dict[str, dict]):
    """The Runs tab's components and events (inside an open ``gr.Tab``). ``outputs`` maps a kind
    (``dish``, ``compare``, ``study``) to that tab's result components by name (with a ``status``).
    Returns ``(refresh function, its outputs)`` for the tab's select event."""
    gr.Markdown("Every run stored on this server, newest first. Pick one and open it: it reopens in its tab "
                "from the run store, without sampling again.")
    with gr.Row():
        refresh = gr.Button("Refresh", size="sm", scale=0)
        choice = gr.Dropdown([], label="Run", allow_custom_value=True, scale=3, elem_id="petri-runs-choice")
        open_btn = gr.Button("Open", variant="primary", scale=0, elem_id="petri-runs-open")
    table = gr.Dataframe(runs_table(service), interactive=False, wrap=True, label="Stored runs",
                         elem_id="petri-runs-table")

    def listed():
        frame = runs_table(service)
        choices = [(f"{r.kind} · {r.created_at} · {r.run_id[:12]} · {r.what[:60]}", r.run_id) for r in frame.itertuples()]
        return frame, gr.update(choices=choices, value=choices[0][1] if choices else None)

    def picked(frame, evt: gr.SelectData):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        return gr.update(value=frame.iloc[row]["run_id"])

    flat = [(kind, name, comp) for kind, comps in outputs.items() for name, comp in comps.items()]

    def open_handler(run_id):
        kind, note, views = runs.open(run_id)
        updates = {comp: views[name] for k, name, comp in flat if k == kind and name in views}
        updates[outputs[kind]["status"]] = note
        updates[tabs] = gr.Tabs(selected=TAB_OF_KIND[kind])
        return updates

    refresh.click(listed, None, [table, choice], show_progress="hidden")
    table.select(picked, table, choice, show_progress="hidden")
    open_btn.click(open_handler, choice, [tabs, *[comp for _, _, comp in flat]], show_progress="minimal")
    return listed, [table, choice]
