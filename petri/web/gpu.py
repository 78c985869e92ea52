"""The model calls of the HTTP API: :func:`run_seed` (``POST /api/seed``), :func:`run_study_job`
(``POST /api/study``) and :func:`run_probe` (a read of ``POST /api/probe``). Off ZeroGPU each goes
through the service and its one-job lock. On ZeroGPU (``SPACES_ZERO_GPU``) each goes through
:mod:`petri.web.gpu_executor`'s ``spaces.GPU`` generators instead: a seed as one call, a study one
call per batch (resumable), a read as one call; no model lock is taken (each call gets its own GPU).
"""

from __future__ import annotations

from collections.abc import Sequence

from petri.app.probe import ProbeRun
from petri.app.service import PetriService, SeedResult
from petri.core.cancel import CancelToken
from petri.core.plan import SeedPlan
from petri.core.settings import FamilySettings
from petri.study.runner import ProgressCallback, StudyResult
from petri.study.schema import Study
from petri.web.gpu_executor import on_zero_gpu, run_zerogpu_read, run_zerogpu_seed, run_zerogpu_study


def run_seed(
    service: PetriService,
    plan: SeedPlan,
    on_step=None,
    wait_s: float | None = None,
    cancel: CancelToken | None = None,
    owner: str | None = None,
) -> SeedResult:
    """Sample every event of ``plan`` (one batch of ``plan.samples`` each) with its concepts pinned;
    ``on_step`` sees each step (a LiveStep) as it comes (the UI's live view); ``cancel`` stops it
    within a step. On ZeroGPU the sampling runs in ``spaces.GPU``'s child and ``wait_s`` is not used
    (no model lock is taken: each call gets its own GPU)."""
    if on_zero_gpu():
        return run_zerogpu_seed(service, plan, on_step=on_step, cancel=cancel, owner=owner)
    return service.seed(plan, on_step=on_step, wait_s=wait_s, cancel=cancel, owner=owner)


def run_study_job(
    service: PetriService,
    study: Study,
    samples: int,
    seed: int,
    settings: FamilySettings,
    templates: Sequence[str] | None,
    wait_s: float | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    owner: str | None = None,
) -> StudyResult:
    """The resumable study runner under the service's lock; ``progress`` sees each finished batch
    (the UI's progress bar); ``cancel`` stops it within a step (stored batches stay). On ZeroGPU
    each batch is one ``spaces.GPU`` call and ``wait_s`` is not used."""
    if on_zero_gpu():
        return run_zerogpu_study(service, study, samples=samples, seed=seed, settings=settings, templates=templates,
                                 progress=progress, cancel=cancel, owner=owner)
    return service.run_study(study, samples=samples, seed=seed, settings=settings, templates=templates,
                             progress=progress, wait_s=wait_s, cancel=cancel, owner=owner)


def run_probe(service, request, wait_s: float | None = None, cancel=None, owner: str | None = None) -> ProbeRun:
    """One slot read on the service (its lock held), stored; ``cancel`` stops it within a step. On
    ZeroGPU the read is one ``spaces.GPU`` call (``wait_s`` not used)."""
    if on_zero_gpu():
        return run_zerogpu_read(service, request, cancel=cancel, owner=owner)
    return service.probe(request, wait_s=wait_s, cancel=cancel, owner=owner)
