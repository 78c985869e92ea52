"""The Runs tab: the stored runs (dish, comparison, study and probe; newest first; model, concepts, time),
from which a run reopens in its own tab with its heatmap, texts, tables and downloads, read from the
run store (:class:`~petri.runs.store.RunStore`): nothing is sampled again, and every input of the tab is
set back to the run's values (so Run starts the same run, and resumes an unfinished study). A study
run that did not finish reopens with the provisional statistics of its stored batches. The list can be searched
(any words, matched in id, kind, status, model, concepts and what was run) and narrowed to a kind.
Each row says what was run first, then its design (events × templates × samples) and a headline
number, the mean flips per free position of each group (:func:`run_headline`, read once per run);
the id, time, model and concepts follow (a probe run's row: its prompt or set, its questions, and each
answer with its probability, or each question's accuracy; it reopens in the Probe tab).
A run can be deleted (Delete asks first: a second press on the same run removes it).

On a public server the tab shows, opens and deletes only the visitor's own runs
(:mod:`petri.web.ui.access`; deleting a run another caller also submitted removes only the
visitor's claim to it); on a local server every run is everyone's, as before.
"""

from __future__ import annotations

from functools import lru_cache

import gradio as gr
import numpy as np
import pandas as pd

from petri.app.service import PetriService
from petri.core.trajectory import settings_from_dict
from petri.core.wording import counted
from petri.measure.summary import EventSummary
from petri.runs.probe_results import EVAL_KIND, PROBE_KIND
from petri.study.execution.runner import StudyResult
from petri.study.results.provisional import stored_batches
from petri.study.schema import StudyError, study_from_dict
from petri.web.access import Caller
from petri.web.ui.access import UiAccess
from petri.web.ui.probe_tab.probe_views import probe_headline, probe_row
from petri.web.ui.views import phone_table_css

RUN_COLUMNS = ["kind", "what", "design", "headline", "status", "run_id", "created_at", "model", "concepts"]
#: Room for each column (px): "what" gets the most, so an event reads as a sentence, not 20 characters.
RUN_COLUMN_WIDTHS: list[str | int] = ["80px", "360px", "150px", "190px", "90px", "150px", "150px", "120px", "150px"]
#: On a phone (600 px or less) the table shows only these columns, each with its share of the width
#: (%), and wraps: its nine columns of fixed width scrolled sideways at 420 px (the picked run's whole
#: row is written above the table).
PHONE_COLUMNS = {"kind": 21, "what": 42, "headline": 37}
HEADLINE = "mean flips per free position"
KIND_FILTERS = ["all", "dish", "compare", "study", "probe"]


RUNS_PHONE_CSS = phone_table_css("petri-runs-table", RUN_COLUMNS, PHONE_COLUMNS)


def run_kind(run: dict) -> str:
    """``"study"``, ``"probe"`` (a slot read or an evaluation), ``"compare"`` (a seed run of two
    events) or ``"dish"``."""
    if run["kind"] == "study":
        return "study"
    if run["kind"] in (PROBE_KIND, EVAL_KIND):
        return "probe"
    return "compare" if len(run["request"].get("events", [])) == 2 else "dish"


def run_row(run: dict, headline: str = "") -> list:
    """One row of the runs table (:data:`RUN_COLUMNS`): kind, what was run, its design, ``headline``,
    status, id, time, model, concepts."""
    request, kind = run["request"], run_kind(run)
    if kind == "probe":
        what, design, questions = probe_row(run)
        return [kind, what, design, headline, run["status"], run["run_id"], run["created_at"], run["model_id"], questions]
    if kind == "study":
        study = request.get("study", {})
        concepts = study.get("concepts", [])
        what = study.get("title", study.get("id", ""))
        design = (f"{counted(len(study.get('events', [])), 'event')} × {counted(len(request.get('templates', [])), 'template')} × "
                  f"{counted(request.get('samples'), 'sample')}")
    else:
        events = request.get("events", [])
        concepts = events[0].get("concepts", []) if events else []
        what = " vs ".join(f"{e.get('group') or ''}{': ' if e.get('group') else ''}{e['event'][:60]}" for e in events)
        design = f"{counted(len(events), 'event')} × {counted(request.get('n_samples'), 'sample')}, seed {request.get('seed')}"
    return [kind, what, design, headline, run["status"], run["run_id"], run["created_at"], run["model_id"],
            ", ".join(concepts)]


def run_headline(service: PetriService, run: dict) -> str:
    """The run's headline: the mean flips per free position over its stored samples, per group when it
    has groups (``"benign 3.21 · contradictory 3.48"``); ``""`` when nothing is stored yet. Read once
    per (run, status, events stored): a finished run does not change."""
    if run_kind(run) == "probe":
        return probe_headline(service.load_results(run["run_id"]), run["kind"])
    return _headline(service.store, run["run_id"], run["status"], run.get("events_stored", 0))


@lru_cache(maxsize=512)
def _headline(store, run_id: str, status: str, events_stored: int) -> str:
    groups: dict[str, list[np.ndarray]] = {}
    for key, group, traj in store.load_events(run_id) if events_stored else []:
        groups.setdefault(group or key, []).append(EventSummary(traj).mean_flips_free)
    if not groups:
        return ""
    means = {g: float(np.nanmean(np.concatenate(v))) for g, v in groups.items()}
    if len(means) > 4 or len(means) == 1:  # a dish, or a study's events without groups: one figure
        return f"{float(np.nanmean(np.concatenate([np.concatenate(v) for v in groups.values()]))):.2f}"
    return " · ".join(f"{g} {m:.2f}" for g, m in means.items())


def visible_runs(service: PetriService, caller: Caller, limit: int = 200) -> list[dict]:
    """The stored runs ``caller`` may see, newest first (its own on a public server)."""
    return service.runs_for(caller.owner, limit, caller.public)


def runs_table(service: PetriService, limit: int = 200, caller: Caller | None = None, search: str = "",
               kind: str = "all") -> pd.DataFrame:
    """The stored runs ``caller`` may see (None: a local caller), newest first; only those of
    ``kind`` (unless ``"all"``) whose row holds every word of ``search`` (case-insensitive)."""
    words = (search or "").lower().split()
    runs = visible_runs(service, caller or Caller(public=False), limit)
    rows = []
    for run in runs:
        row = run_row(run)
        if (kind in (None, "", "all") or row[0] == kind) and all(w in searchable(run, row) for w in words):
            rows.append(run_row(run, run_headline(service, run)))
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def searchable(run: dict, row: list) -> str:
    """What a search reads of a run: its row and every event's whole text (the row shows only the
    first 60 characters of an event), lower-cased."""
    request = run["request"]
    events = request.get("events", []) if run_kind(run) != "study" else request.get("study", {}).get("events", [])
    texts: list = [e.get("event", e.get("text", "")) if isinstance(e, dict) else str(e) for e in events]
    return " ".join([*map(str, row), *texts]).lower()


OPEN_LABEL, OPEN_BUSY_LABEL = "Open", "Opening…"
#: After a reopen: the opened tab's first result line scrolled into view (the page stayed where the Open button was).
SHOW_OPENED_JS = """() => { setTimeout(() => {
  const shown = [...document.querySelectorAll('#petri-tabs [role=tabpanel]')].find((p) => p.offsetParent !== null);
  const target = shown && shown.querySelector('[id$="-run-badge"], [id$="-status"]');
  if (target && !document.getElementById('petri-runs-status').textContent.trim()) target.scrollIntoView({block: 'start'});
}, 300); }"""


def empty_note(query: str, kind: str) -> str:
    """What the Runs tab says when no stored run matches (an empty table said nothing)."""
    narrowed = f" of kind *{kind}*" if kind not in (None, "", "all") else ""
    if (query or "").strip():
        return f"No stored run{narrowed} matches *{query.strip()}*."
    return f"No stored run{narrowed} yet."


def run_details(frame: pd.DataFrame, run_id: str | None) -> str:
    """The picked run's row, every column on its own line (``""`` when none is picked)."""
    rows = frame[frame["run_id"] == run_id] if run_id and not frame.empty else frame.iloc[0:0]
    if rows.empty:
        return ""
    row = rows.iloc[0]
    return "**Picked:** " + " · ".join(f"{column}: {row[column]}" for column in RUN_COLUMNS if str(row[column]))


def run_choice_label(kind: str, created_at: str, run_id: str) -> str:
    """A run as the Run choice shows it, short enough for a phone's box: kind, the minute it was
    stored (``created_at``, ISO 8601, as the store writes it) and the id's first 12 characters
    (``"dish · 2026-12-07 04:59 · 56c90fda4810"``). What was run is in the table and in the picked
    run's row under the choice: with it the label was cut at 420 px ("dish · 2026-12-06T23")."""
    return f"{kind} · {created_at[:16].replace('T', ' ')} · {run_id[:12]}"


def run_choices(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """(label, run id) for each row of a runs table, in its order (:func:`run_choice_label`)."""
    return [(run_choice_label(r.kind, r.created_at, r.run_id), r.run_id) for r in frame.itertuples()]


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
        model_fingerprint=request.get("model_fingerprint", ""), settings=settings_from_dict(request["settings"]),
        samples=int(request["samples"]), seed=int(request["seed"]), template_ids=template_ids, batches=batches,
        computed=0, resumed=len(batches), store_path=service.store_path, started_at=run["created_at"],
        finished_at=run["finished_at"] or "", device=batches[0].trajectory.device,
        # nothing is computed on a reopen: its time is the stored batches' own sampling time
        wall_s=sum(float(b.trajectory.timings.get("total_s", 0.0)) for b in batches),
    )
    return result, len(study.events) * len(template_ids)


def reopen_study(ctl, service: PetriService, run: dict, caller: Caller) -> dict:
    """A stored study run's views in the Study tab (``ctl``: its controller): the final report when
    every batch is stored, else the provisional statistics of the stored batches; its controls."""
    try:
        result, total = study_result_from_store(service, run)
    except (StudyError, ValueError) as err:
        raise gr.Error(f"cannot reopen study run {run['run_id']}: {err}", title="Runs") from None
    controls = ctl.controls_of(run, result.study)
    if len(result.batches) == total and run["status"] == "done":
        return {**ctl.final_views(result, total, caller), **controls}
    views = ctl.live_views(result.study, result.run_id, result.template_ids, result.settings,
                           result.seed, total, model_id=result.model_id)
    return {**views, **controls}


def stored_events(service: PetriService, run: dict) -> tuple[list, list]:
    """(trajectories, groups) of a stored seed run (gr.Error where it has none)."""
    stored = service.load_events(run["run_id"])
    if not stored:
        raise gr.Error(f"run {run['run_id']} ({run['status']}) stopped before its first event finished: "
                       "it recorded nothing to show", title="Runs")
    return [traj for _, _, traj in stored], [group for _, group, _ in stored]


def reopen_compare(ctl, service: PetriService, run: dict, caller: Caller) -> dict:
    """A stored comparison (two events) in the Compare tab, with its controls."""
    trajectories, groups = stored_events(service, run)
    labels = (groups[0] or "A", groups[1] or "B")
    return {**ctl.views(run["run_id"], trajectories[0], trajectories[1], labels),
            **ctl.controls_of(run["request"], trajectories[0])}


def reopen_dish(ctl, service: PetriService, run: dict, caller: Caller) -> dict:
    """A stored dish in the Dish tab, with its controls."""
    trajectories, groups = stored_events(service, run)
    return {**ctl.result_views(run["run_id"], trajectories, groups, caller),
            **ctl.controls_of(run["request"], trajectories[0])}


def reopen_probe(ctl, service: PetriService, run: dict, caller: Caller) -> dict:
    """A stored probe read (with its inputs) or evaluation in the Probe tab."""
    return ctl.reopen(run, caller)


#: how a run of each kind reopens: (its tab's controller, service, run, caller) → that tab's views by name
REOPEN = {"dish": reopen_dish, "compare": reopen_compare, "study": reopen_study, "probe": reopen_probe}


class RunsController:
    """Reopens a stored run into the tab of its kind. ``controllers`` maps a kind (``dish``,
    ``compare``, ``study``: the tab ids of :data:`petri.web.ui.build.RESULT_TABS`) to that tab's
    controller; ``reopen`` maps it to how such a run reopens (:data:`REOPEN`)."""

    def __init__(self, service: PetriService, controllers: dict, reopen: dict | None = None):
        self.service, self.controllers, self.reopen = service, controllers, reopen or REOPEN

    def delete(self, run_id: str, caller: Caller | None = None) -> str:
        """Delete stored run ``run_id`` if ``caller`` may open it (on a public server only the
        caller's claim goes while another caller claims it too); the status line."""
        caller = caller or Caller(public=False)
        run = UiAccess.open_run(self.service, caller, run_id)
        self.service.remove_run(run["run_id"], caller.owner if caller.public else None)
        return f"Deleted run `{run['run_id']}`."

    def confirm_delete(self, run_id: str, armed: str | None, caller: Caller | None = None) -> tuple[str, str | None]:
        """The Delete button, in two presses: the first on a run only asks (the run is ``armed``), the
        second on the same run deletes it (:meth:`delete`). Returns (status line, the run now armed)."""
        caller = caller or Caller(public=False)
        run = UiAccess.open_run(self.service, caller, run_id)  # an unknown or foreign run: one message, as Open
        if armed != run["run_id"]:
            return (f"Delete run `{run['run_id']}` ({run_kind(run)}, {run['created_at']})? It cannot be undone: "
                    "press **Delete** again to remove it.", run["run_id"])
        return self.delete(run_id, caller), None

    def open(self, run_id: str, caller: Caller | None = None) -> tuple[str, str, dict]:
        """(kind, status line, the views of that kind by name) of stored run ``run_id``, which
        ``caller`` (None: a local caller) may open; its downloads go to ``caller``'s folder."""
        caller = caller or Caller(public=False)
        run = UiAccess.open_run(self.service, caller, run_id)
        kind = run_kind(run)
        note = f"Reopened {kind} run `{run['run_id']}` ({run['status']}, {run['created_at']}) from the store; nothing was sampled."
        return kind, note, self.reopen[kind](self.controllers[kind], self.service, run, caller)


def build_runs_tab(service: PetriService, tabs: gr.Tabs, runs_tab: gr.Tab, runs: RunsController,
                   outputs: dict[str, dict], access: UiAccess | None = None) -> None:
    """The Runs tab's components and events (inside the open ``runs_tab``). ``outputs`` maps a kind
    (``dish``, ``compare``, ``study``) to that tab's result components by name (with a ``status``).
    Every handler asks ``access`` who called it."""
    access = access or UiAccess()
    mine = "Your runs on this server (each visitor sees only their own)" if access.policy.public else \
        "Every run stored on this server"
    gr.Markdown(f"{mine}, newest first. Pick one and open it: it reopens in its tab from the run store, "
                "without sampling again.")
    with gr.Row():
        search = gr.Textbox("", label="Search", placeholder="words in id, concepts, events…", scale=3,
                            elem_id="petri-runs-search")
        kind_filter = gr.Dropdown(KIND_FILTERS, value="all", label="Kind", scale=1, elem_id="petri-runs-kind")
        refresh = gr.Button("Refresh", size="sm", scale=0, elem_id="petri-runs-refresh")
    # a public page is the same for every visitor: its runs arrive with the visitor's first refresh
    initial = runs_table(service) if not access.policy.public else pd.DataFrame(columns=RUN_COLUMNS)
    initial_choices = run_choices(initial)
    with gr.Row():
        # no run picked when the page is built (at the server's start: a run stored since is newer, so
        # the build's newest was the oldest one by the time the tab opened); the tab's refresh picks the newest
        choice = gr.Dropdown(initial_choices, value=None, label="Run", min_width=300,  # a phone's whole row
                             allow_custom_value=True, scale=3, elem_id="petri-runs-choice")
        open_btn = gr.Button(OPEN_LABEL, variant="primary", scale=0, elem_id="petri-runs-open")
        delete_btn = gr.Button("Delete", variant="stop", scale=0, elem_id="petri-runs-delete")
    # the picked run whole (a narrow screen cuts the choice's label and shows only the table's first columns)
    picked_note = gr.Markdown("", elem_id="petri-runs-picked")
    runs_note = gr.Markdown("", elem_id="petri-runs-status")
    table = gr.Dataframe(initial, interactive=False, wrap=True, label=f"Stored runs (headline: {HEADLINE})",
                         column_widths=RUN_COLUMN_WIDTHS, elem_id="petri-runs-table")

    def listed(request: gr.Request, query: str = "", kind: str = "all", current: str | None = None):
        """The table, the run choices, the note under them (what an empty result means) and the
        picked run's details. While the run the visitor had picked is still listed the choice is left
        alone, so a refresh that lands after a click on a row (its inputs were read before the click)
        cannot move the choice to another run; otherwise the newest run is picked."""
        frame = runs_table(service, caller=access.caller(request), search=query, kind=kind)
        choices = run_choices(frame)
        ids = [run_id for _, run_id in choices]
        note = "" if ids else empty_note(query, kind)
        if current in ids:
            return frame, gr.update(choices=choices), note, run_details(frame, current)
        value = ids[0] if ids else None
        return frame, gr.update(choices=choices, value=value), note, run_details(frame, value)

    def relisted(request: gr.Request, query: str, kind: str, current: str | None):
        """The list read again after an Open (a run deleted meanwhile, which a failed Open usually
        means, leaves it), the note under it (an Open's message) left alone."""
        frame, choices, _, details = listed(request, query, kind, current)
        return frame, choices, details

    armed = gr.State(None)  # the run a first Delete press asked about

    def deleted(request: gr.Request, run_id: str, query: str, kind: str, asked: str | None):
        try:
            note, now_armed = runs.confirm_delete(run_id, asked, access.caller(request))
        except gr.Error as err:
            return f"**Cannot delete:** {err.message}", gr.update(), gr.update(), gr.update(), None
        if now_armed is not None:  # asked, nothing deleted yet
            return note, gr.update(), gr.update(), gr.update(), now_armed
        frame, choices, _, details = listed(request, query, kind)
        return note, frame, choices, details, None

    def picked(frame, evt: gr.SelectData):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        run_id = frame.iloc[row]["run_id"]
        return gr.update(value=run_id), run_details(frame, run_id)

    flat = [(kind, name, comp) for kind, comps in outputs.items() for name, comp in comps.items()]

    def open_handler(request: gr.Request, run_id):
        try:
            kind, note, views = runs.open(run_id, access.caller(request))
        except gr.Error as err:  # one message here: no other tab's component is touched (a raised error marks them all)
            return {runs_note: f"**Cannot open:** {err.message}"}
        updates = {comp: views[name] for k, name, comp in flat if k == kind and name in views}
        updates[outputs[kind]["status"]] = note
        updates[tabs] = gr.Tabs(selected=kind)  # a kind's tab has the kind's id (RESULT_TABS)
        updates[runs_note] = ""
        return updates

    filters = [search, kind_filter]
    listing = [table, choice, runs_note, picked_note]
    # One listener lists for every trigger (the tab shown, Refresh, the kind, the search as the visitor
    # types, not only on Enter), one listing at a time: a trigger that comes while a listing is in flight
    # waits for it and then reads the search box and the kind afresh ("always_last"). With a listener
    # each, a listing that had read the box before a keystroke could land after the keystroke's own
    # and show the unfiltered list (or blank the no-match note) until the next keystroke.
    gr.on([runs_tab.select, refresh.click, kind_filter.change, search.change], listed, [*filters, choice],
          listing, show_progress="hidden", trigger_mode="always_last")
    delete_btn.click(deleted, [choice, *filters, armed], [runs_note, table, choice, picked_note, armed],
                     show_progress="hidden")
    # Another run picked: Delete asks again. These two small handlers skip the queue (queue=False). A
    # listing that picks a run fires the first; as a queued event it could end just as the search's
    # own listing was sent, and Gradio's client (6.31) then closed the event stream that listing's
    # answer was to come on: the table kept the unfiltered list (about one search in three on this
    # 2-core machine, seen in the server's log and the page's requests).
    choice.change(lambda: None, None, armed, show_progress="hidden", queue=False)
    choice.input(run_details, [table, choice], picked_note, show_progress="hidden", queue=False)
    table.select(picked, table, [choice, picked_note], show_progress="hidden")
    # a reopen takes seconds: the button says so at once (outside the queue), then the opened tab is shown
    # with its results in view
    open_btn.click(lambda: gr.update(value=OPEN_BUSY_LABEL, interactive=False), None, open_btn, queue=False,
                   show_progress="hidden").then(
        open_handler, choice, [tabs, runs_note, *[comp for _, _, comp in flat]], show_progress="minimal").then(
        relisted, [*filters, choice], [table, choice, picked_note], show_progress="hidden").then(
        lambda: gr.update(value=OPEN_LABEL, interactive=True), None, open_btn, show_progress="hidden", js=SHOW_OPENED_JS)
