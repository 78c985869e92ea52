"""Running one model job for a UI event handler (a generator) and streaming what it reports.

The Dish, Compare and Study tabs submit their work to the service's job queue, the same jobs
``POST /api/jobs/*`` makes (:mod:`petri.app.jobs`): :func:`stream` calls ``submit(emit)``, which
queues the job with ``emit`` as its in-process hook (the sampler's per-step callback, the study
runner's per-batch progress), and yields ``("progress", payload)`` for each call, then
``("done", result)``. A Cancel button sets the ``cancel`` event: the job is cancelled (a queued one
never starts, a running one stops within one denoising step; a study's stored batches stay) and
:class:`JobCancelled` is raised in the handler. A failed job raises :class:`JobFailed`.

:func:`wire_run` wires a tab's Run and Cancel buttons (a tab's validator, made with
:func:`field_validation`, refuses bad inputs before anything is queued); :class:`CancelButtons`
keeps one cancel event per browser session, so a Cancel button stops that session's run only.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
from pydantic import ValidationError

from petri.app.jobs import FINAL, Job, JobQueue
from petri.app.service import PetriService
from petri.core.cancel import Cancelled, CancelToken
from petri.core.plan import SeedPlan
from petri.study.plan import StudyPlan
from petri.web.errors import FieldError
from petri.web.gpu_executor import zerogpu_seed_stream, zerogpu_study_stream
from petri.web.ui.access import UiAccess
from petri.web.ui.views import field_message, request_error_message


class JobCancelled(RuntimeError):
    """The job was cancelled (by the user, or interrupted by a server that stops)."""


class JobFailed(RuntimeError):
    """The job failed; the message is the job's error."""


def stream(
    submit: Callable[[Callable[..., None]], Job],
    jobs: JobQueue,
    *,
    cancel: threading.Event | None = None,
    poll_s: float = 0.1,
    idle: bool = False,
) -> Iterator[tuple[str, Any]]:
    """Yield ``("progress", args)`` for each ``emit(*args)`` of the job that ``submit(emit)``
    queued (``args`` is the tuple ``emit`` was called with, or its one element), then
    ``("done", job.result)``; with ``idle``, also ``("idle", None)`` after each ``poll_s`` without a
    message (a throttled view draws what it held back). Raises :class:`JobCancelled` /
    :class:`JobFailed`, and what ``submit`` raises (e.g. :class:`petri.app.jobs.QueueFull`)."""
    messages: queue.Queue = queue.Queue()

    def emit(*args) -> None:
        messages.put(args[0] if len(args) == 1 else args)

    job = submit(emit)
    asked = False
    while True:
        if cancel is not None and cancel.is_set() and not asked:
            jobs.cancel(job.job_id)
            asked = True
        try:
            payload = messages.get(timeout=poll_s)
        except queue.Empty:
            if job.status in FINAL and messages.empty():
                break
            if idle and not asked:
                yield "idle", None
            continue
        if not asked:
            yield "progress", payload
    if job.status == "done":
        yield "done", job.result
        return
    if job.status in ("cancelled", "interrupted"):
        raise JobCancelled(f"the job was {job.status}")
    raise JobFailed(job.error or "the job failed")


#: The status a Run click shows at once while another job holds the model: the run waits behind it
#: (in Gradio's queue, whose counter shows beside the line, or in the service's job queue).
QUEUED_LINE = "⏳ Queued: another job is using the model; this run starts when it ends."
#: The status line while a cancelled run stops.
CANCELLING_LINE = "Cancelling: the run stops within one denoising step…"


def queued_status(busy: bool):
    """The status line's update on a Run click: :data:`QUEUED_LINE` while the model is ``busy``
    (instead of the previous run's last line), else none (the run's own first line comes at once)."""
    return QUEUED_LINE if busy else gr.update()


#: How the status line starts when a Run click's inputs are refused (each bad field's message follows).
REFUSED_LINE = "⚠ Not run: "


def click_status(checks: list[dict] | None, busy: bool, shown: str | None = None):
    """The status line's update on a Run click: when ``checks`` (the tab's validator's answer, None:
    no validator) refuses the inputs, :data:`REFUSED_LINE` and each bad field's message (the run is
    never queued); else :func:`queued_status`, except that a refusal ``shown`` on the line from an
    earlier click is cleared (it no longer holds) when the run starts at once. The refusal stays on the status line because the mark
    Gradio draws on the field itself lives in the field's loading status, which the next status
    update of any other event in the page replaces (Gradio 6's frontend), so it can vanish a moment
    later (e.g. when the slot table's redraw after a concept edit ends just after the refusal)."""
    bad = [c["message"] for c in checks or () if not c["is_valid"]]
    if bad:
        return REFUSED_LINE + "; ".join(bad)
    return "" if not busy and (shown or "").startswith(REFUSED_LINE) else queued_status(busy)


def field_validation(n_inputs: int, check: Callable[[], Any], input_of: Callable[[list, str], int]) -> list[dict]:
    """A Gradio validator's answer (``n_inputs`` ``gr.validate`` dicts): ``check()`` runs the request's
    checks (those of the API, raising pydantic's ``ValidationError`` or a :class:`FieldError`); each
    error marks input ``input_of(loc, kind)`` (``loc`` without ``body`` / ``settings``, ``kind`` the
    error's type) with its message, naming the field; every other input passes."""
    problems: dict[int, list[str]] = {}
    try:
        check()
    except ValidationError as err:
        for e in err.errors():
            loc = [p for p in e["loc"] if p not in ("body", "settings")]
            problems.setdefault(input_of(loc, e["type"]), []).append(field_message(e))
    except FieldError as err:
        loc = [p for p in err.loc if p not in ("body", "settings")]
        problems.setdefault(input_of(loc, err.kind), []).append(request_error_message(err))
    return [gr.validate(i not in problems, "; ".join(problems.get(i, []))) for i in range(n_inputs)]


def wire_run(run_btn, cancel_btn, run: Callable[..., Iterator[dict]], inputs: list, names: dict,
             access: UiAccess | None = None, busy: Callable[[], bool] | None = None,
             validator: Callable[..., list[dict]] | None = None, mark_fields: bool = True, **click: Any) -> None:
    """Wire a tab's Run and Cancel buttons: Run streams ``run(*inputs, cancel=event, caller=who)``
    (``who``: the event's caller under ``access``, which owns the run; updates keyed by output
    name, mapped through ``names`` to components), Cancel sets that browser session's event (at
    once: it is in no concurrency group). ``validator`` (the inputs' :func:`field_validation`)
    refuses bad inputs before the run is queued, marking the bad field. ``click`` goes to Run's
    ``click``. With ``busy`` (whether another job holds the model) or ``validator``, the click also
    sets ``names["status"]`` at once, outside the queue, to :func:`click_status`: the refusal for
    inputs that ``validator`` refuses (never queued), the queued line for others while busy.
    ``mark_fields=False``: ``validator`` only writes the status line, and the run (queued whatever
    the inputs) refuses them itself when it starts. For a tab whose inputs Gradio's validator step
    cannot read: in Gradio 6.31 that step checked the Study tab's template choice against the
    choices the page was built with, not those a loaded study set, and so refused every loaded
    study before it was queued (``tests/web/ui/test_browser.py``'s study tests)."""
    cancels = CancelButtons()
    access = access or UiAccess()
    if busy is not None or validator is not None:
        def at_once(*args):  # the run's inputs, then the status line as it reads
            *values, shown = args
            checks = validator(*values) if validator is not None else None
            return click_status(checks, busy is not None and busy(), shown)

        # registered before the run's click: Gradio runs a click's events in order, so this one
        # (which clears its inputs' field messages as it starts) ends before the validator marks them
        run_btn.click(at_once, [*inputs, names["status"]], names["status"], queue=False, show_progress="hidden")

    def run_handler(request: gr.Request, *args):  # Gradio passes the request first
        caller = access.submitter(request)
        event = cancels.start(request.session_hash)
        try:
            for update in run(*args, cancel=event, caller=caller):
                yield {names[k]: v for k, v in update.items()}
        finally:
            cancels.finish(request.session_hash, event)

    def cancel_handler(request: gr.Request):
        # on the status line, which the stopped run then rewrites (a toast stayed after the run had stopped)
        if cancels.cancel(request.session_hash):
            return CANCELLING_LINE
        gr.Info("Nothing to cancel: no run of this tab is going on in this browser.")
        return gr.update()

    run_btn.click(run_handler, inputs, list(names.values()), validator=validator if mark_fields else None, **click)
    cancel_btn.click(cancel_handler, None, names["status"], concurrency_limit=None, show_progress="hidden")


class CancelButtons:
    """One cancel event per browser session (``gr.Request.session_hash``): :meth:`start` hands a
    run its fresh event, :meth:`cancel` sets the session's current one (and says whether a run was
    going on), :meth:`finish` forgets a run that ended."""

    def __init__(self) -> None:
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def start(self, session: str | None) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._events[session or ""] = event
        return event

    def cancel(self, session: str | None) -> bool:
        """Set the session's running run's event; False when no run of the session is going on."""
        with self._lock:
            event = self._events.get(session or "")
        if event is None:
            return False
        event.set()
        return True

    def finish(self, session: str | None, event: threading.Event) -> None:
        """Forget ``event`` once its run ended (unless a newer run of the session replaced it)."""
        with self._lock:
            if self._events.get(session or "") is event:
                del self._events[session or ""]


def zerogpu_stream(service: PetriService, plan: SeedPlan, owner: str | None = None,
                   cancel: threading.Event | None = None, with_event: bool = False) -> Iterator[tuple[str, Any]]:
    """:func:`petri.web.gpu_executor.zerogpu_seed_stream` for a UI run handler, in place of
    :func:`stream` on ZeroGPU: the same ``("progress", LiveStep)`` / ``("done", SeedResult)`` items
    (``with_event``: ``("progress", (event, LiveStep))``, as the Compare tab's job reports them),
    through :func:`zerogpu_events`."""
    return zerogpu_events(lambda token: zerogpu_seed_stream(service, plan, owner, token, with_event), cancel)


def zerogpu_events(start: Callable[[CancelToken], Iterator[tuple[str, Any]]],
                   cancel: threading.Event | None = None) -> Iterator[tuple[str, Any]]:
    """The items of the ZeroGPU stream ``start(token)`` makes, for a UI run handler: a Cancel
    button's ``cancel`` event seen at the next step (the token's heartbeat), a cancel raised as
    :class:`JobCancelled` (:class:`~petri.web.gpu_executor.GpuAborted` as itself)."""
    token = CancelToken()
    token.heartbeat = lambda: token.cancel("cancelled") if cancel is not None and cancel.is_set() else None
    try:
        yield from start(token)
    except Cancelled as stop:
        raise JobCancelled(f"the job was {stop.reason}") from None


def zerogpu_study(service: PetriService, plan: StudyPlan, owner: str | None,
                  cancel: threading.Event | None = None) -> Iterator[tuple[str, Any]]:
    """:func:`petri.web.gpu_executor.zerogpu_study_stream` for the Study tab, in place of
    :func:`stream` on ZeroGPU: ``("progress", StudyProgress)`` per batch, then ``("done", StudyResult)``."""
    return zerogpu_events(lambda token: zerogpu_study_stream(service, plan, owner=owner, cancel=token), cancel)
