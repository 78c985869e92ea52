"""Run a study: events × templates × samples, one batch per (event, template), resumable.

Every finished (event, template) batch is committed to the :class:`~petri.runs.store.RunStore` before
the next one starts, so a crash loses at most the batch in flight. The run id is derived from
everything that determines the numbers (study content, model fingerprint, settings, samples, seed,
templates), so rerunning the same command finds the run and skips what is stored. Each batch's
seed is derived from the base seed and the (event id, template id) pair, never from run order, so a
resumed run and an uninterrupted one give identical numbers.

Batches are stored at their plan position (events outer, templates inner) but *run* in
:func:`batch_order`: the groups interleaved (compared groups first), so the provisional group
comparison can appear after a few batches instead of after every batch of the first group.

Hold :meth:`petri.app.service.PetriService.exclusive` around :func:`run_study` when the model is
shared (the UI does; ``PetriService.run_study`` does it for you).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from tqdm.auto import tqdm

from petri.core.cancel import Cancelled
from petri.core.dish import Dish
from petri.core.settings import FamilySettings
from petri.core.trajectory import Trajectory
from petri.core.watch import NO_WATCH, Watch
from petri.engine.base import SamplingModel
from petri.runs.export import EventCondition
from petri.runs.store import RunStore
from petri.study.execution.executors import BatchJob, LocalExecutor, StudyExecutor, check_layouts  # noqa: F401 (check_layouts: re-exported)
from petri.study.plan import StudyPlan
from petri.study.schema import Study, StudyEvent, Template
from petri.study.slots import SharedSlotsDish

#: Bump when a change makes stored batches incompatible with new ones (new run ids then).
RUN_FORMAT = 1


@dataclass(frozen=True)
class StudyBatch:
    """One (event, template) batch of the study and its trajectory; in a paired study one (event,
    template, condition) batch (``condition`` and its ``dose``, if any; ``""`` and ``None`` otherwise)."""

    event_id: str
    template_id: str
    group: str
    seed: int
    trajectory: Trajectory
    condition: str = ""
    dose: float | None = None

    @property
    def key(self) -> str:
        return batch_key(self.event_id, self.template_id, self.condition)


@dataclass(frozen=True)
class StudyProgress:
    """What the progress callback receives after each batch is stored (or found stored): stored
    batches first (``skipped``, plan order), then computed ones as they land (any order).
    ``worker`` names who sampled this batch (``""`` when skipped); ``by_worker`` counts the batches
    each worker has delivered in this run so far."""

    done: int
    total: int
    event_id: str
    template_id: str
    group: str
    skipped: bool
    elapsed_s: float
    worker: str = ""
    by_worker: dict[str, int] = field(default_factory=dict)


@dataclass
class StudyResult:
    """A finished study run: every batch in study order (events outer, templates inner)."""

    study: Study
    run_id: str
    model_id: str
    model_fingerprint: str
    settings: FamilySettings
    samples: int
    seed: int
    template_ids: tuple[str, ...]
    batches: list[StudyBatch]
    computed: int
    resumed: int
    store_path: str
    started_at: str
    finished_at: str
    wall_s: float
    device: str = "cpu"
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def trajectories(self) -> list[Trajectory]:
        return [b.trajectory for b in self.batches]

    def metadata(self) -> dict:
        """Run facts for the JSON sidecar and the report."""
        return {
            "run_id": self.run_id,
            "study_id": self.study.id,
            "study_title": self.study.title,
            "study_file": self.study.source,
            "study_file_sha256": self.study.file_sha256,
            "study_content_sha256": self.study.content_hash(),
            "model_id": self.model_id,
            "model_fingerprint": self.model_fingerprint,
            "device": self.device,
            "settings": self.settings.to_dict(),
            "samples_per_batch": self.samples,
            "seed": self.seed,
            "templates": list(self.template_ids),
            "batches": len(self.batches),
            "batches_computed_this_run": self.computed,
            "batches_resumed_from_store": self.resumed,
            "store": self.store_path,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "wall_s": self.wall_s,
            "timings": self.timings,
        }


def batch_key(event_id: str, template_id: str, condition: str = "") -> str:
    """The store key of a batch: ``event::template``, plus ``::condition`` in a paired study."""
    return f"{event_id}::{template_id}" + (f"::{condition}" if condition else "")


def split_key(key: str) -> tuple[str, str, str]:
    """``(event_id, template_id, condition)`` of a :func:`batch_key` (condition ``""`` when unpaired)."""
    event_id, template_id, *rest = key.split("::", 2)
    return event_id, template_id, rest[0] if rest else ""


def study_batch(study: Study, key: str, seed: int, trajectory: Trajectory) -> StudyBatch:
    """The :class:`StudyBatch` stored under ``key`` (its group, batch seed, condition and dose)."""
    event_id, template_id, condition = split_key(key)
    group = next(e.group for e in study.events if e.id == event_id)
    dose = study.condition(condition).dose if condition else None
    return StudyBatch(event_id, template_id, group, batch_seed(seed, event_id, template_id), trajectory, condition, dose)


def stored_conditions(run: dict | None, keys: Sequence[str]) -> list[EventCondition] | None:
    """The condition (and dose) under which each stored event of ``run`` (a run store row: its ``kind``
    and ``request``) was sampled, read from the events' store keys ``keys`` (:func:`batch_key`) and
    the stored study's conditions: what a run's exports tag its rows with
    (:func:`petri.runs.export.with_condition`). None for any run but a paired study's. Raises
    ValueError naming a key whose condition the study does not have."""
    if run is None or run.get("kind") != "study":
        return None
    conditions = ((run.get("request") or {}).get("study") or {}).get("conditions") or []
    if not conditions:
        return None
    doses = {c["id"]: None if c.get("dose") is None else float(c["dose"]) for c in conditions}
    out = []
    for key in keys:
        condition = split_key(key)[2]
        if condition not in doses:
            raise ValueError(f"event key {key!r}: condition {condition!r} is not one of the study's {list(doses)}")
        out.append(EventCondition(condition, doses[condition]))
    return out


def plan_cells(study: Study, templates: tuple[Template, ...]) -> list[tuple[StudyEvent, Template, str, Dish]]:
    """Every batch of the study in plan order (events outer, templates, then conditions inner): (event,
    template, condition id or ``""``, dish). Every condition of an event gets the same slots
    (:class:`~petri.study.slots.SharedSlotsDish`) and, through :func:`batch_seed`, the same seed."""
    if not study.paired:
        return [(e, t, "", Dish(study.event_concepts(e), e.text, t.text)) for e in study.events for t in templates]
    return [(e, t, c.id, SharedSlotsDish(study.condition_concepts(e, c.id), study.condition_text(e, c.id), t.text,
                                         slot_concepts=study.slot_concepts(e)))
            for e in study.events for t in templates for c in study.conditions]


def batch_seed(seed: int, event_id: str, template_id: str) -> int:
    """The seed of one (event, template) batch: a hash of (base seed, event id, template id),
    independent of the order batches run in. 31 bits, so any RNG accepts it. Every condition of a
    paired study's event shares it (the conditions are paired on the same noise and layouts)."""
    digest = hashlib.sha256(f"petri-study/{int(seed)}/{event_id}/{template_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _event_rank(seed: int, event_id: str) -> bytes:
    return hashlib.sha256(f"petri-study-order/{int(seed)}/{event_id}".encode()).digest()


def batch_order(jobs: list[BatchJob], study: Study, seed: int) -> list[BatchJob]:
    """The order ``jobs`` run in (they are stored at their plan positions whatever the order):
    template by template (in the given order), and within a template the groups take turns (the
    compared pair first, then the shown groups, then the rest), each group's events in an order
    shuffled by a hash of (``seed``, event id). Deterministic from the study and the seed, so a
    resume, a one-process run and a Ray run plan the same order; the numbers never depend on it."""
    group_rank = {g: i for i, g in enumerate(dict.fromkeys((*study.comparison, *study.show, *study.groups)))}
    template_rank = {t: i for i, t in enumerate(dict.fromkeys(job.template_id for job in jobs))}
    out: list[BatchJob] = []
    for template_id in template_rank:
        lanes: dict[str, list[BatchJob]] = {}
        for job in sorted((j for j in jobs if j.template_id == template_id), key=lambda j: _event_rank(seed, j.event_id)):
            lanes.setdefault(job.group, []).append(job)
        queues = [lanes[g] for g in sorted(lanes, key=lambda g: group_rank.get(g, len(group_rank)))]
        for turn in range(max(len(q) for q in queues)):
            out.extend(q[turn] for q in queues if turn < len(q))
    return out


def study_run_id(
    study: Study,
    model_id: str,
    settings: FamilySettings,
    samples: int,
    seed: int,
    template_ids: tuple[str, ...],
    fingerprint: str = "",
    device_type: str = "cpu",
) -> str:
    """Lowercase hex run id (24 characters) derived from everything that fixes the numbers."""
    key = {
        "format": RUN_FORMAT,
        "study": study.content_hash(),
        "model_id": model_id,
        "fingerprint": fingerprint,
        "device_type": device_type,
        "settings": settings.to_dict(),
        "samples": int(samples),
        "seed": int(seed),
        "templates": list(template_ids),
    }
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def stopped_status(err: BaseException) -> str:
    """The status a run gets when ``err`` stops it: the cancel reason, ``interrupted`` on Ctrl-C,
    else ``failed``."""
    if isinstance(err, Cancelled):
        return err.reason
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    return "failed"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_study(
    lm: SamplingModel | StudyExecutor,
    plan: StudyPlan,
    store: RunStore,
    *,
    watch: Watch = NO_WATCH,
    on_run_id: Callable[[str], None] | None = None,
) -> StudyResult:
    """Sample every (event, template) batch of ``plan.study`` (``plan.samples`` shuffled layouts
    each) and commit each to ``store`` as it lands; batches already stored under the same run id are
    skipped (a resume). Returns every batch, reloaded from the store so fresh and resumed runs are
    read back identically.

    Args:
        lm: a loaded model (the batches run here, in :func:`batch_order`) or a :class:`StudyExecutor`
            (e.g. :class:`petri.study.execution.ray_executor.RayExecutor`: the batches run on its workers and
            land in any order; only this process writes the store).
        plan: the study, samples, seed, settings (``None``: the model's defaults) and templates
            (:class:`~petri.study.plan.StudyPlan`, checked when it was made).
        watch: ``progress`` is called with a :class:`StudyProgress` after each batch (stored or
            skipped; an exception it raises aborts the run, the stored batches stay); ``on_step``
            goes to the sampler for live per-step views (a loaded model only); ``show_progress``
            draws a tqdm bar on stderr; ``cancel`` stops the run within one denoising step
            (:class:`~petri.core.cancel.Cancelled`), which is then stored as ``cancelled`` or
            ``interrupted`` (the token's reason), as it is ``interrupted`` on Ctrl-C, and the same
            call resumes it.
        on_run_id: called with the run id once the run is registered in the store (before sampling).
    """
    study, samples, seed = plan.study, plan.samples, plan.seed
    if isinstance(lm, StudyExecutor):
        if watch.on_step is not None:
            raise ValueError("watch.on_step needs a model in this process, not an executor")
        executor = lm
    else:
        executor = LocalExecutor(lm, watch.on_step)
    facts = executor.facts()
    settings = plan.settings or facts.default_settings
    template_ids = plan.template_ids
    fingerprint = facts.fingerprint
    run_id = study_run_id(study, facts.model_id, settings, samples, seed, template_ids, fingerprint, facts.device_type)
    jobs = [
        BatchJob(position, batch_key(e.id, t.id, c), e.id, t.id, e.group, dish, samples, settings,
                 batch_seed(seed, e.id, t.id), run_id)
        for position, (e, t, c, dish) in enumerate(plan_cells(study, plan.chosen))
    ]
    executor.check_layouts([job.dish for job in jobs], settings)
    request = {
        "study": study.to_dict(),
        "study_file": study.source,
        "study_file_sha256": study.file_sha256,
        "model_fingerprint": fingerprint,
        "settings": settings.to_dict(),
        "samples": samples,
        "seed": seed,
        "templates": list(template_ids),
    }
    started_at, started = _now(), time.perf_counter()
    store.create_run(run_id, "study", facts.model_id, request)
    if on_run_id is not None:
        on_run_id(run_id)
    stored = store.completed_events(run_id)
    todo = [job for job in batch_order(jobs, study, seed) if job.key not in stored]
    landed: set[str] = set()
    by_worker: dict[str, int] = {}
    sample_s = 0.0
    bar = tqdm(total=len(jobs), desc=f"study {study.id}", unit="batch", disable=not watch.show_progress, initial=len(jobs) - len(todo))
    if len(todo) < len(jobs):
        bar.set_postfix_str(f"{len(jobs) - len(todo)} batches resumed from the store")

    def report(done: int, job: BatchJob, skipped: bool, worker: str) -> None:
        if watch.progress is not None:
            watch.progress(StudyProgress(done, len(jobs), job.event_id, job.template_id, job.group, skipped,
                                   time.perf_counter() - started, worker, dict(by_worker)))

    def on_landed(job: BatchJob, traj: Trajectory, worker: str) -> None:
        nonlocal sample_s
        if job.key in landed or job.key in stored:
            raise RuntimeError(f"batch {job.key} landed twice (worker {worker}); it is stored once")
        store.save_event(run_id, job.position, job.key, traj, group=job.group)
        landed.add(job.key)
        by_worker[worker] = by_worker.get(worker, 0) + 1
        sample_s += float(traj.timings.get("total_s", 0.0))
        bar.update(1)
        per_worker = " ".join(f"{w}:{n}" for w, n in sorted(by_worker.items()))
        bar.set_postfix_str(per_worker if worker != "local" else f"{job.event_id}/{job.template_id}")
        report(len(jobs) - len(todo) + len(landed), job, False, worker)

    try:
        for done, job in enumerate((job for job in jobs if job.key in stored), start=1):
            report(done, job, True, "")
        executor.run(todo, on_landed, watch.cancel)
    except BaseException as err:
        try:
            store.finish_run(run_id, stopped_status(err), error=f"{type(err).__name__}: {err}")
        except Exception:  # the store itself may be what failed; keep the original error
            pass
        raise
    finally:
        bar.close()
    computed = len(landed)

    batches = [study_batch(study, key, seed, traj) for key, _, traj in store.load_events(run_id)
               if split_key(key)[1] in template_ids]
    if len(batches) != len(jobs):
        raise RuntimeError(f"run store {store.path}: run {run_id} holds {len(batches)} of {len(jobs)} batches after the run")
    store.finish_run(run_id, "done")
    wall = time.perf_counter() - started
    return StudyResult(
        study=study,
        run_id=run_id,
        model_id=facts.model_id,
        model_fingerprint=fingerprint,
        settings=settings,
        samples=samples,
        seed=seed,
        template_ids=template_ids,
        batches=batches,
        computed=computed,
        resumed=len(jobs) - computed,
        store_path=str(store.path),
        started_at=started_at,
        finished_at=_now(),
        wall_s=wall,
        device=facts.device,
        timings={
            "wall_s": wall,
            "sampling_s_this_run": sample_s,
            "mean_batch_s": float(sum(b.trajectory.timings.get("total_s", 0.0) for b in batches) / len(batches)),
            "sampling_s_all_batches": float(sum(b.trajectory.timings.get("total_s", 0.0) for b in batches)),
        },
    )
