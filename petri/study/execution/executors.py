"""Where a study's batches run: in this process (:class:`LocalExecutor`) or elsewhere (a Ray
cluster: :mod:`petri.study.execution.ray_executor`).

The study runner plans the (event, template) batches, hands the ones not yet stored to an executor
and commits each returned trajectory to the run store as it lands, in whatever order they land.
An executor only samples: it never writes the store. Each :class:`BatchJob` carries its own seed
(derived from the base seed and the ids), so a batch gives the same numbers wherever it runs, on
the same kind of device.

Remote executors load their own model from a :class:`ModelSpec` (the name, backend, device and
dtype options the command got), never from a model object: a 26B model does not travel.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from petri.core.cancel import CancelToken
from petri.core.dish import Dish
from petri.core.paths import use_assets_dir
from petri.core.settings import FamilySettings
from petri.core.trajectory import Trajectory
from petri.engine.base import SamplingModel, StepCallback
from petri.engine.seeding import plan_dish, seed_dish
from petri.study.slots import SharedSlotsDish, resolve_dish


@dataclass(frozen=True)
class BatchJob:
    """One (event, template) batch to sample: ``samples`` shuffled layouts of ``dish`` with ``seed``.
    ``position`` is its index in the study plan (events outer, templates inner)."""

    position: int
    key: str
    event_id: str
    template_id: str
    group: str
    dish: Dish
    samples: int
    settings: FamilySettings
    seed: int
    run_id: str | None = None  # the study run it belongs to (every live step names it)


@dataclass(frozen=True)
class ModelFacts:
    """What the driver needs to know about the model an executor samples with (the run id is derived
    from ``model_id``, ``fingerprint`` and ``device_type``; ``default_settings`` seed the sampler
    options)."""

    model_id: str
    fingerprint: str
    device_type: str
    device: str
    default_settings: FamilySettings

    @classmethod
    def of(cls, lm: SamplingModel) -> ModelFacts:
        return cls(lm.model_id, lm.fingerprint(), lm.device_type, str(lm.describe()["device"]), lm.default_settings())


class ExecutorError(RuntimeError):
    """An executor cannot run the study: its runtime missing (Ray), its cluster unreachable, workers
    that never start or disagree about the model."""


#: Called by :meth:`StudyExecutor.run` in the caller's thread, once per job: (job, trajectory, worker name).
BatchLanded = Callable[[BatchJob, Trajectory, str], None]


class StudyExecutor(ABC):
    """Runs batches somewhere and hands each trajectory back as it lands (the interface)."""

    #: what progress shows (e.g. ``"local"``, ``"ray (2 workers)"``)
    name = "executor"

    @abstractmethod
    def facts(self) -> ModelFacts:
        """What fixes the numbers and names the run: model id, fingerprint, device kind."""

    @abstractmethod
    def check_layouts(self, dishes: Sequence[Dish], settings: FamilySettings) -> None:
        """Raise :class:`~petri.core.dish.LayoutError` when a concept set does not fit the canvas."""

    @abstractmethod
    def run(self, jobs: Sequence[BatchJob], on_landed: BatchLanded, cancel: CancelToken | None = None) -> None:
        """Sample every job; call ``on_landed`` once per job as its trajectory arrives (any order).
        An exception raised by ``on_landed`` stops the run and propagates (the landed ones stay);
        ``cancel`` stops it (:class:`~petri.core.cancel.Cancelled`) within a step here, or once the
        driver next looks on a cluster."""

    def close(self) -> None:  # noqa: B027 - a no-op default, overridden by the executors that hold workers
        """Release workers (no-op by default)."""


def check_layouts(lm: SamplingModel, dishes: Sequence[Dish], settings: FamilySettings) -> None:
    """Lay out every distinct concept set once before sampling anything, so a concept set that does
    not fit the canvas fails the whole run up front (raises :class:`~petri.core.dish.LayoutError`);
    a paired study's dish is laid out in its shared slots (:mod:`petri.study.slots`)."""
    probes = (SharedSlotsDish(d.concepts, "x", slot_concepts=d.slot_concepts) if isinstance(d, SharedSlotsDish)
              else Dish(d.concepts, "x") for d in dishes)
    for probe in dict.fromkeys(probes):
        plan_dish(lm, resolve_dish(lm, probe, settings), 1, settings, seed=0)


def sample_batch(lm: SamplingModel, job: BatchJob, on_step: StepCallback | None = None,
                 cancel: CancelToken | None = None) -> Trajectory:
    """One job's trajectory (S = ``job.samples`` samples) on ``lm``: what every executor runs."""
    return seed_dish(lm, resolve_dish(lm, job.dish, job.settings), job.samples, job.settings, seed=job.seed, on_step=on_step, cancel=cancel,
                     run_id=job.run_id)


class LocalExecutor(StudyExecutor):
    """The batches in the order given, in this process, on an already loaded model."""

    name = "local"

    def __init__(self, lm: SamplingModel, on_step: StepCallback | None = None):
        self.lm = lm
        self.on_step = on_step

    def facts(self) -> ModelFacts:
        return ModelFacts.of(self.lm)

    def check_layouts(self, dishes: Sequence[Dish], settings: FamilySettings) -> None:
        check_layouts(self.lm, dishes, settings)

    def run(self, jobs: Sequence[BatchJob], on_landed: BatchLanded, cancel: CancelToken | None = None) -> None:
        for job in jobs:
            on_landed(job, sample_batch(self.lm, job, self.on_step, cancel), "local")


@dataclass(frozen=True)
class ModelSpec:
    """How a worker loads its own copy of the model: the ``--model/--backend/--device/--dtype/
    --compile/--threads/--allow-download/--precision`` options and the configuration's prompt-cache limit
    and assets folder (:class:`petri.core.config.PetriConfig`), as plain values that travel to another
    process or machine."""

    name: str | None = None
    backend: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    compile: bool | None = None  # None: on where it is the default (torch on CUDA with Triton)
    threads: int | None = None
    allow_download: bool = False
    precision: str = "bf16"  # issue 25: "fp8", "fp8-fast+sc-fp8", …: the opt-in FP8 tier (petri.engine.precision_choice)
    trust_remote_code: bool = False
    prompt_cache_mb: int | None = None  # None: the engine's default (PETRI_PROMPT_CACHE_MB, petri.core.config)
    assets: str | None = None  # None: the default assets folder (PETRI_ASSETS, petri.core.config)

    def load(self) -> SamplingModel:
        from petri.engine.select import load_backend_model

        if self.threads is not None:
            from petri.engine.torch.device import set_cpu_threads

            set_cpu_threads(self.threads)
        if self.assets is not None:
            use_assets_dir(self.assets)
        lm = load_backend_model(self.name, backend=self.backend, device=self.device, dtype=self.dtype,
                                allow_download=self.allow_download, compile=self.compile,
                                precision=self.precision, trust_remote_code=self.trust_remote_code)
        if self.prompt_cache_mb is not None:
            from petri.engine.torch.prompt_cache import set_prompt_cache_bytes

            set_prompt_cache_bytes(lm, self.prompt_cache_mb * 2**20)
        return lm
