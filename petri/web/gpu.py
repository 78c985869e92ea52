"""The model calls of the HTTP API: :func:`run_seed` (``POST /api/seed``), :func:`run_study_job`
(``POST /api/study``) and :func:`run_probe` (a read of ``POST /api/probe``). Off ZeroGPU each goes
through the service and its one-job lock. On ZeroGPU (``SPACES_ZERO_GPU``) each goes through
:mod:`petri.web.gpu_executor`'s ``spaces.GPU`` generators instead: a seed as one call, a study one
call per batch (resumable), a read as one call; no model lock is taken (each call gets its own GPU).
"""

from __future__ import annotations

from petri.app.probe import ProbeRun
from petri.app.service import PetriService, SeedResult
from petri.core.plan import ProbePlan, SeedPlan
from petri.core.watch import NO_WATCH, Watch
from petri.study.execution.runner import StudyResult
from petri.study.plan import StudyPlan
from petri.web.gpu_executor import on_zero_gpu, run_zerogpu_read, run_zerogpu_seed, run_zerogpu_study


def run_seed(service: PetriService, plan: SeedPlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
             owner: str | None = None) -> SeedResult:
    """Sample every event of ``plan`` (one batch of ``plan.samples`` each) with its concepts pinned;
    ``watch.on_step`` sees each step (a LiveStep) as it comes (the UI's live view); ``watch.cancel``
    stops it within a step. On ZeroGPU the sampling runs in ``spaces.GPU``'s child and ``wait_s`` is
    not used (no model lock is taken: each call gets its own GPU)."""
    if on_zero_gpu():
        return run_zerogpu_seed(service, plan, on_step=watch.on_step, cancel=watch.cancel, owner=owner)
    return service.seed(plan, watch=watch, wait_s=wait_s, owner=owner)


def run_study_job(service: PetriService, plan: StudyPlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
                  owner: str | None = None) -> StudyResult:
    """The resumable study runner under the service's lock; ``watch.progress`` sees each finished
    batch (the UI's progress bar); ``watch.cancel`` stops it within a step (stored batches stay). On
    ZeroGPU each batch is one ``spaces.GPU`` call and ``wait_s`` is not used."""
    if on_zero_gpu():
        return run_zerogpu_study(service, plan, watch=watch, owner=owner)
    return service.run_study(plan, watch=watch, wait_s=wait_s, owner=owner)


def run_probe(service: PetriService, plan: ProbePlan, *, watch: Watch = NO_WATCH, wait_s: float | None = None,
              owner: str | None = None) -> ProbeRun:
    """One slot read on the service (its lock held), stored; ``watch.cancel`` stops it within a step. On
    ZeroGPU the read is one ``spaces.GPU`` call (``wait_s`` not used)."""
    if on_zero_gpu():
        return run_zerogpu_read(service, plan, cancel=watch.cancel, owner=owner)
    return service.probe(plan, watch=watch, wait_s=wait_s, owner=owner)
