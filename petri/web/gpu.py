"""The model calls of the HTTP API: :func:`run_seed` (``POST /api/seed``) and :func:`run_study_job`
(``POST /api/study``). Off ZeroGPU both go through the service and its one-job lock. On ZeroGPU
(``SPACES_ZERO_GPU``) a seed goes through :mod:`petri.web.gpu_executor`'s ``spaces.GPU`` generator
instead; :func:`run_study_job` is still wrapped whole by :func:`gpu_task`, which cannot work there
(its arguments, the service among them, would have to be pickled into the GPU child): studies on
ZeroGPU are not built (issue 63)."""

from __future__ import annotations

from collections.abc import Callable

from petri.app.service import PetriService, SeedResult
from petri.core.plan import SeedPlan
from petri.core.watch import NO_WATCH, Watch
from petri.study.plan import StudyPlan
from petri.study.runner import StudyResult
from petri.web.gpu_executor import on_zero_gpu, run_zerogpu_seed


def gpu_task(fn: Callable) -> Callable:
    """Hugging Face ZeroGPU: run ``fn`` under ``spaces.GPU`` when the ``spaces`` package is there."""
    try:
        import spaces  # type: ignore[import-not-found]
    except ImportError:
        return fn
    return spaces.GPU(duration=120)(fn)


def run_seed(service: PetriService, plan: SeedPlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
             owner: str | None = None) -> SeedResult:
    """Sample every event of ``plan`` (one batch of ``plan.samples`` each) with its concepts pinned;
    ``watch.on_step`` sees each step (a LiveStep) as it comes (the UI's live view); ``watch.cancel``
    stops it within a step. On ZeroGPU the sampling runs in ``spaces.GPU``'s child and ``wait_s`` is
    not used (no model lock is taken: each call gets its own GPU)."""
    if on_zero_gpu():
        return run_zerogpu_seed(service, plan, on_step=watch.on_step, cancel=watch.cancel, owner=owner)
    return service.seed(plan, watch=watch, wait_s=wait_s, owner=owner)


@gpu_task
def run_study_job(service: PetriService, plan: StudyPlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
                  owner: str | None = None) -> StudyResult:
    """The resumable study runner under the service's lock; ``watch.progress`` sees each finished
    batch (the UI's progress bar); ``watch.cancel`` stops it within a step (stored batches stay)."""
    return service.run_study(plan, watch=watch, wait_s=wait_s, owner=owner)
