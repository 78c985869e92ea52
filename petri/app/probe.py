"""Probe runs on the service: one slot read while the caller waits (run kind ``probe``) and a
labelled set's evaluation as a job (run kind ``probe-eval``), both under the service's one-job lock
and stored in the run store, so the Runs tab lists and reopens them.

Every request is checked before anything is stored: a :class:`~petri.core.probe.ProbeInputError`
(which names the bad field) leaves the store as it was. A read stores its run once it is done (it
takes seconds); an evaluation registers its run when the job starts, so a cancel, a failure or a
crash leaves a run marked ``cancelled``, ``failed`` or ``interrupted``
(:meth:`petri.runs.store.RunStore.mark_unfinished_interrupted`), never a run that seems to run on.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from petri.app.jobs import Job, JobContext, recorded_run
from petri.core.plan import ProbePlan
from petri.core.probe import DEFAULT_MIN_MASS, ProbeInputError
from petri.core.watch import NO_WATCH, Watch
from petri.engine.probe import ProbeResult, layout_probe, read_planned
from petri.runs.probe_results import EVAL_KIND, EVAL_TABLES, PARTIAL_PREFIX, PROBE_KIND, frame_document, plain, read_document
from petri.study.probe.probe_eval import EVAL_ORDER, ProbeEvaluation, evaluate, item_request
from petri.study.probe.probe_set import LabelledSet, labelled_set_lines

if TYPE_CHECKING:
    from petri.engine.base import SamplingModel


@dataclass
class ProbeRun:
    """A stored slot read: its run id, the engine's result, the stored document and the wall time."""

    run_id: str
    result: ProbeResult
    document: dict
    wall_s: float


@dataclass
class ProbeEvalRun:
    """A stored evaluation: its run id, the evaluation and the wall time."""

    run_id: str
    evaluation: ProbeEvaluation
    wall_s: float


@dataclass(frozen=True)
class EvalSettings:
    """How a labelled set is read: noise draws (an int or ``"auto"``), denoising steps, the seed,
    how many times the whole set is read (repeatability), the order of the alternatives
    (:func:`petri.core.probe.listing_orders`; every cyclic order unless told) and the mass on the
    labels below which a read answers None."""

    samples: int | str = 1
    steps: int = 1
    seed: int = 0
    repeats: int = 1
    order: str = EVAL_ORDER
    min_mass: float = DEFAULT_MIN_MASS


def labelled_to_dict(labelled: LabelledSet) -> dict:
    """A labelled set as JSON data (stored with its evaluation run, so the run says what it read):
    its JSONL header with ``items``, one per line of :func:`petri.study.probe.probe_set.labelled_set_lines`."""
    header, *items = (json.loads(line) for line in labelled_set_lines(labelled))
    return {**header, "items": items}


def check_labelled(lm: SamplingModel, labelled: LabelledSet, settings: EvalSettings) -> None:
    """Raise :class:`ProbeInputError` where an item of ``labelled`` cannot be read on ``lm``
    (:func:`petri.engine.probe.layout_probe`, no model work), naming the field in the set:
    ``items[i].prompt`` or ``items[i].frame`` for what is the item's own, the set's field else."""
    for index, item in enumerate(labelled.items):
        try:
            layout_probe(lm, item_request(labelled, item, samples=settings.samples, steps=settings.steps,
                                        seed=settings.seed, order=settings.order, min_mass=settings.min_mass))
        except ProbeInputError as err:
            own = err.field == "prompt" or (err.field == "frame" and item.frame is not None)
            if not own:
                raise
            message = str(err).removeprefix(f"{err.field}: ")
            raise ProbeInputError(f"items[{index}].{err.field}", f"item {item.item_id!r}: {message}") from None


def probe(service, plan: ProbePlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
          owner: str | None = None) -> ProbeRun:
    """Read ``plan`` (:func:`petri.engine.probe.plan_probe`: the request checked and laid out on the
    service's model at the edge) on the service's model, holding its lock (``watch.cancel`` stops it
    within a step, or while it waits), store the read as a ``probe`` run (``owner``, a token hash,
    may open it on a public server) and return it."""
    started = time.perf_counter()
    with service.cancellable(watch.cancel) as token, service.exclusive(wait_s, token):
        result = read_planned(service.lm, plan, cancel=token)
        run_id, document = save_read(service, result, owner)
    return ProbeRun(run_id, result, document, time.perf_counter() - started)


def save_read(service, result: ProbeResult, owner: str | None = None) -> tuple[str, dict]:
    """Store a finished read as a new ``probe`` run of the service's model: (its run id, its document)."""
    document = read_document(result)
    run_id = uuid.uuid4().hex
    service.store.create_run(run_id, PROBE_KIND, service.lm.model_id, {"probe": document["request"]}, owner)
    service.store.save_result(run_id, "read", document)
    service.store.finish_run(run_id, "done")
    return run_id, document


def submit_probe_eval(service, labelled: LabelledSet, settings: EvalSettings = EvalSettings(),
                      owner: str | None = None, on_item: Callable[[int, int], None] | None = None) -> Job:
    """Check ``labelled`` (:func:`check_labelled`: a refusal raises before anything is queued or
    stored), then queue its evaluation as a ``probe-eval`` job whose progress counts items read
    (items × repeats). The run is registered when the job starts; each read's prediction rows are
    committed as they come (documents ``read/<n>``: a cancel or a crash loses nothing read, and the
    run's ``predictions`` table reads them), replaced at the end by the predictions, summary,
    reliability and the evaluation's ``meta``. The job's result is a :class:`ProbeEvalRun`;
    ``on_item(done, total)`` (in-process callers such as the UI) sees each item."""
    check_labelled(service.lm, labelled, settings)

    def work(ctx: JobContext) -> ProbeEvalRun:
        started = time.perf_counter()
        run_id = uuid.uuid4().hex
        request = {"set": labelled_to_dict(labelled), **asdict(settings)}
        service.store.create_run(run_id, EVAL_KIND, service.lm.model_id, request, owner)
        ctx.set_run_id(run_id)
        ctx.progress(0, len(labelled.items) * settings.repeats, "item")

        def item_done(done: int, total: int) -> None:
            ctx.progress(done, total, "item")
            if on_item is not None:
                on_item(done, total)

        reads = [0]

        def rows_done(rows: list[dict]) -> None:
            service.store.save_result(run_id, f"{PARTIAL_PREFIX}{reads[0]:06d}", {"rows": plain(rows)})
            reads[0] += 1

        with recorded_run(service.store, run_id):
            evaluation = evaluate(service.lm, labelled, samples=settings.samples, steps=settings.steps,
                                  seed=settings.seed, repeats=settings.repeats, order=settings.order,
                                  min_mass=settings.min_mass, on_item=item_done, on_rows=rows_done, cancel=ctx.cancel)
            for name in EVAL_TABLES:
                service.store.save_result(run_id, name, frame_document(getattr(evaluation, name)))
            service.store.save_result(run_id, "evaluation", {"meta": plain(evaluation.meta)})
            service.store.drop_results(run_id, PARTIAL_PREFIX)
        return ProbeEvalRun(run_id, evaluation, time.perf_counter() - started)

    return service.jobs.submit(EVAL_KIND, work, owner)
