"""The model calls of the web app, each wrapped for Hugging Face ZeroGPU (``spaces.GPU``) where the
``spaces`` package is installed: :func:`run_seed` (``POST /api/seed`` and the Dish tab) and
:func:`run_study_job` (``POST /api/study`` and the Study tab). Both go through the service and its
one-job lock."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from petri.app.service import PetriService, SeedResult
from petri.core.cancel import CancelToken
from petri.core.plan import SeedPlan
from petri.core.settings import FamilySettings
from petri.study.runner import ProgressCallback, StudyResult
from petri.study.schema import Study


def gpu_task(fn: Callable) -> Callable:
    """Hugging Face ZeroGPU: run ``fn`` under ``spaces.GPU`` when the ``spaces`` package is there."""
    try:
        import spaces  # type: ignore[import-not-found]
    except ImportError:
        return fn
    return spaces.GPU(duration=120)(fn)


@gpu_task
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
    within a step."""
    return service.seed(plan, on_step=on_step, wait_s=wait_s, cancel=cancel, owner=owner)


@gpu_task
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
    (the UI's progress bar); ``cancel`` stops it within a step (stored batches stay)."""
    return service.run_study(study, samples=samples, seed=seed, settings=settings, templates=templates,
                             progress=progress, wait_s=wait_s, cancel=cancel, owner=owner)
