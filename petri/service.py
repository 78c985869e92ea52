"""The one object that owns the loaded model, the run store and the lock that lets one model job
run at a time. The HTTP routes and the Gradio UI are thin layers over it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from petri.dish import Dish
from petri.engine.base import SamplingModel, StepCallback
from petri.engine.seeding import seed_dish
from petri.study.runner import ProgressCallback, StudyResult, run_study
from petri.store import RunStore, StoreError
from petri.study.schema import Study
from petri.trajectory import SamplerSettings, Trajectory


class BusyError(RuntimeError):
    """Another model job holds the lock and did not finish within the wait allowed."""


@dataclass(frozen=True)
class SeedEvent:
    """One event of a seed request: the dish to sample and an optional group label."""

    dish: Dish
    group: str | None = None


@dataclass
class SeedResult:
    run_id: str
    trajectories: list[Trajectory]
    groups: list[str | None]
    wall_s: float


class PetriService:
    """Loaded model + run store + a lock (one model job at a time)."""

    def __init__(self, lm: SamplingModel, store: RunStore, busy_wait_s: float = 0.0):
        self.lm = lm
        self.store = store
        self.busy_wait_s = busy_wait_s
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @contextmanager
    def exclusive(self, wait_s: float | None = None) -> Iterator[None]:
        """Hold the model for one job; raise :class:`BusyError` if it stays taken for ``wait_s``."""
        wait = self.busy_wait_s if wait_s is None else wait_s
        acquired = self._lock.acquire(timeout=wait) if wait > 0 else self._lock.acquire(blocking=False)
        if not acquired:
            raise BusyError(f"a model job is already running (waited {wait:.0f} s); try again later")
        try:
            yield
        finally:
            self._lock.release()

    def seed(
        self,
        events: Sequence[SeedEvent],
        n_samples: int,
        settings: SamplerSettings | None = None,
        seed: int = 0,
        on_step: StepCallback | None = None,
        wait_s: float | None = None,
    ) -> SeedResult:
        """Sample every event (one batch per event), store each as it finishes, return them all."""
        settings = settings or self.lm.default_settings()
        run_id = uuid.uuid4().hex
        request = {
            "events": [{"event": e.dish.event, "group": e.group, "concepts": list(e.dish.concepts)} for e in events],
            "n_samples": n_samples,
            "settings": settings.to_dict(),
            "seed": seed,
        }
        started = time.perf_counter()
        with self.exclusive(wait_s):
            self.store.create_run(run_id, "seed", self.lm.model_id, request)
            trajectories = []
            try:
                for index, event in enumerate(events):
                    traj = seed_dish(self.lm, event.dish, n_samples, settings, seed=seed, on_step=on_step)
                    self.store.save_event(run_id, index, f"event{index}", traj, event.group)
                    trajectories.append(traj)
            except Exception as err:
                try:
                    self.store.finish_run(run_id, "failed", error=str(err))
                except StoreError:  # the store itself may be what failed (full disk): keep the original error
                    pass
                raise
            self.store.finish_run(run_id, "done")
        return SeedResult(run_id, trajectories, [e.group for e in events], time.perf_counter() - started)

    def run_study(
        self,
        study: Study,
        *,
        samples: int = 12,
        seed: int = 0,
        settings: SamplerSettings | None = None,
        templates: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
        on_step: StepCallback | None = None,
        wait_s: float | None = None,
        show_progress: bool = False,
    ) -> StudyResult:
        """:func:`petri.study.runner.run_study` on this service's model and store, holding the one-job
        lock for the whole study (raises :class:`BusyError` if another job holds it). Rerunning the
        same study with the same arguments resumes from the store."""
        with self.exclusive(wait_s):
            return run_study(
                self.lm, study, self.store, samples=samples, seed=seed, settings=settings, templates=templates,
                progress=progress, on_step=on_step, show_progress=show_progress,
            )
