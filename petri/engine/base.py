"""The engine boundary: what every backend's loaded model offers, and the errors it raises.

Layers above the engine (seeding, the study runner, the service, the web edge, the CLI) talk to a
:class:`SamplingModel` only: they never import torch or mlx. A backend implements the protocol
with its own loaded-model class (``petri.engine.torch.model.LoadedModel`` for PyTorch on CUDA, MPS
or the CPU; ``petri.engine.mlx.sampler.MLXLoadedModel`` for MLX). Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from petri.core.cancel import CancelToken
from petri.core.settings import FamilySettings
from petri.core.trajectory import AnchorSpan, SamplerSettings, Trajectory, check_sampler_inputs


@dataclass(frozen=True)
class LiveStep:
    """One denoising step as the live callback sees it, on the host: ``index`` (from 0), the raw
    ``argmax`` (S, L) int, the ``canvas`` after the step (S, L) int (what the trajectory's
    ``canvas`` records: kept draws and fresh noise for uniform diffusion, committed tokens and the
    mask token for masked diffusion), ``accepted`` (S, L) bool and ``finished`` (S,) bool (the
    samples that stop after it): the step's rows of the record, so a sample that finished before
    this step has -1 in ``argmax`` and ``canvas`` and False in ``accepted``. ``pinned`` (S, L) bool:
    what each sample pins (the request's canvas prefix and anchors; the same every step), and
    ``run_id``: the run the request samples for (:attr:`SampleRequest.run_id`), both set by the loop
    (:func:`petri.engine.loop.run_loop`)."""

    index: int
    argmax: Any
    canvas: Any
    accepted: Any
    finished: Any
    pinned: Any = None
    run_id: str | None = None


#: Called after each step with its :class:`LiveStep`.
StepCallback = Callable[[LiveStep], None]

#: The step read hook (:meth:`SteppedModel.read_steps`; diffusers' ``callback_on_step_end`` in
#: spirit): called at every step after the model's forward and before the family's step uses it,
#: with the step's index (from 0) and the step's tensors by name, the framework's own, on the
#: device and valid during the call only: ``logits`` (S, L, V), what the forward returned, and
#: ``canvas`` (S, L), the canvas it read.
StepRead = Callable[[int, Mapping[str, Any]], None]

REAL_MODEL_ID = "google/diffusiongemma-26B-A4B-it"


@dataclass(frozen=True)
class EngineFacts:
    """What a loaded model is and how it runs here, as data (:meth:`SamplingModel.facts`), so the
    layers above read it without reaching into a backend's state: ``backend`` (``"torch"`` or
    ``"mlx"``), ``family`` and ``tier`` (as the trajectory names them), ``device`` (``str`` of it,
    e.g. ``"cuda:0"``), ``device_type`` (what a run id tells apart, e.g. ``"cuda-compiled"``),
    ``dtype`` (e.g. ``"bfloat16"``), ``architecture`` (the model class's name) and
    ``kept_prompt_bytes``: the most bytes of encoded prompts it keeps for prompts sent again
    (:mod:`petri.engine.torch.prompt_cache`; 0: none; ``None``: it has no prompt encoder)."""

    backend: str
    family: str
    tier: str
    device: str
    device_type: str
    dtype: str
    architecture: str
    kept_prompt_bytes: int | None


class ModelNotFoundError(RuntimeError):
    """The named model is neither a local folder nor in the local Hugging Face cache."""


class BackendUnavailableError(RuntimeError):
    """The backend asked for cannot run here (not installed, or no such backend)."""


@runtime_checkable
class SamplingModel(Protocol):
    """A loaded DiffusionGemma on one backend, ready to run the pinned, logged sampler.

    Attributes: ``tokenizer`` (a transformers tokenizer; ``None`` only for benchmark models without
    a vocabulary), ``model_id`` (what every output names), ``backend`` (``"torch"`` or ``"mlx"``).
    """

    tokenizer: Any
    model_id: str
    backend: str

    @property
    def canvas_length(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def device(self) -> Any:
        """Where it runs: a ``torch.device`` (torch), ``"mlx"`` (MLX); ``str()`` of it names it."""
        ...

    @property
    def device_type(self) -> str:
        """``"cuda"``, ``"mps"``, ``"cpu"`` or ``"mlx"`` (``"cuda-compiled"`` in the GPU fast path's
        compiled tier): what a run id must tell apart (numbers differ between them)."""
        ...

    def default_settings(self) -> FamilySettings:
        """The model's settings, of its family's settings type (:mod:`petri.engine.families.registry`)."""
        ...

    def describe(self) -> dict[str, str | int]:
        """``model_id``, ``device``, ``dtype``, ``canvas_length``, ``vocab_size`` (for every output)."""
        ...

    def fingerprint(self) -> str:
        """A cheap hash of config and weights (16 hex characters), so a retrained checkpoint under
        the same name never resumes a stored study run."""
        ...

    @property
    def family(self) -> str:
        """The model family, which names its step: ``"uniform-diffusion"`` (DiffusionGemma) or
        ``"masked-diffusion"`` (BERT-style, LLaDA, Dream)."""
        ...

    @property
    def tier(self) -> str:
        """How the family's step runs here, named in every trajectory (``eager``, ``mlx``, ``fast``,
        ``fast+compiled+…``, ``masked``)."""
        ...

    @property
    def max_positions(self) -> int | None:
        """The positions the model reads (prompt and canvas together), ``None`` when unbounded."""
        ...

    @property
    def max_prompt_length(self) -> int | None:
        """The largest prompt (tokens) that fits with the canvas, ``None`` when unbounded."""
        ...

    def facts(self) -> EngineFacts:
        """What the model is and how it runs, as data (:class:`EngineFacts`, read now: the kept
        prompts' limit can change; :func:`engine_facts` makes it)."""
        ...

    def sample(self, request: SampleRequest, *, on_step: StepCallback | None = None,
               cancel: CancelToken | None = None) -> Trajectory:
        """Denoise one canvas per layout (a batch of S = ``len(request.layouts)``), the prompt (P,)
        encoded once; anchors and ``request.canvas_prefix`` pinned at every step. ``cancel`` is
        checked at the start of every step (raises :class:`~petri.core.cancel.Cancelled`)."""
        ...


class TorchLoadedModel(SamplingModel, Protocol):
    """A :class:`SamplingModel` of the torch backend as the engine's torch and CUDA modules use it:
    ``model`` (the transformers module), ``dtype`` (a ``torch.dtype``) and ``fast_tier`` (the GPU fast
    path's state, :class:`petri.engine.torch.fast_tier.FastTier`). Typed Any here: naming the torch
    classes would import torch, and ``petri.engine.torch.model.LoadedModel`` imports those modules."""

    model: Any
    dtype: Any
    fast_tier: Any


class SteppedModel(SamplingModel, Protocol):
    """A :class:`SamplingModel` whose family's eager step can be read at every step (the torch
    backend's models; what the probe reads, :mod:`petri.engine.probe`)."""

    def read_steps(self, request: SampleRequest, steps: int, on_read: StepRead, *,
                   cancel: CancelToken | None = None) -> None:
        """Run ``steps`` steps of the family's eager step on ``request`` (seeded and pinned as
        :meth:`sample` is; no early stop), calling ``on_read`` (:data:`StepRead`) at each, with
        gradients off. The last step runs only its forward (its read is all that is wanted of it).
        ``cancel`` is checked at the start of every step."""
        ...


@dataclass(frozen=True)
class SampleRequest:
    """One sampling call: the encoded prompt (P,), per sample its anchors (S layouts), the family's
    settings, the seed (``None``: leave the generator as it is), the tokens pinned at the canvas
    start of every sample (the thought block), the prompt's text (stored with the trajectory) and
    the run it samples for (``None``: none; every :class:`LiveStep` names it)."""

    prompt_ids: Sequence[int]
    layouts: Sequence[Sequence[AnchorSpan]]
    settings: Any
    seed: int | None = None
    canvas_prefix: Sequence[int] = ()
    prompt_text: str = ""
    run_id: str | None = None

    def __post_init__(self) -> None:
        check_sampler_inputs(self.prompt_ids, self.layouts)


#: the settings a spelled-out sampler call uses unless told (DiffusionGemma's defaults)
DEFAULT_SETTINGS = SamplerSettings()


def spelled_out(sample: Callable[..., Trajectory]) -> Callable[..., Trajectory]:
    """``sample(lm, request, **kwargs)`` (a backend's sampler) with the request spelled out:
    ``run(lm, prompt_ids, layouts, settings=SamplerSettings(), *, seed=None, canvas_prefix=(),
    prompt_text="", **kwargs)``, the arguments being the fields of :class:`SampleRequest` (the
    prompt (P,), one layout per sample) and ``kwargs`` what ``sample`` takes besides."""

    def run(lm, prompt_ids: Sequence[int], layouts: Sequence[Sequence[AnchorSpan]],
            settings: Any = DEFAULT_SETTINGS, *, seed: int | None = None, canvas_prefix: Sequence[int] = (),
            prompt_text: str = "", **kwargs) -> Trajectory:
        return sample(lm, SampleRequest(prompt_ids, layouts, settings, seed, canvas_prefix, prompt_text), **kwargs)

    run.__doc__ = f":func:`{sample.__module__}.{sample.__name__}` with the request spelled out (:func:`spelled_out`)."
    return run


class RequestSampling:
    """:meth:`SamplingModel.sample` of a model whose backend samples with one function of
    ``(lm, request, *, on_step, cancel, fixed_noise)`` (``fixed_noise``: the parity hook,
    :mod:`petri.engine.fixed_noise`), which the model's :meth:`sampler` names."""

    def sampler(self) -> Callable[..., Trajectory]:
        """The backend's sampling function."""
        raise NotImplementedError

    def sample(self, request: SampleRequest, *, on_step: StepCallback | None = None,
               cancel: CancelToken | None = None, fixed_noise: Any = None) -> Trajectory:
        """:meth:`sampler` on this model (see :meth:`SamplingModel.sample`)."""
        return self.sampler()(self, request, on_step=on_step, fixed_noise=fixed_noise, cancel=cancel)


def settings_from_generation_config(generation_config) -> SamplerSettings:
    """Read DiffusionGemma's sampler settings off a (DiffusionGemma)GenerationConfig; unset ones keep
    :class:`SamplerSettings`' defaults, which are transformers' global defaults."""
    defaults = SamplerSettings()
    if generation_config is None:
        return defaults
    sampler_config = getattr(generation_config, "sampler_config", None)
    entropy_bound = getattr(sampler_config, "entropy_bound", None)
    if isinstance(sampler_config, dict):
        entropy_bound = sampler_config.get("entropy_bound")

    def pick(name):
        value = getattr(generation_config, name, None)
        return getattr(defaults, name) if value is None else value

    return SamplerSettings(
        max_denoising_steps=int(pick("max_denoising_steps")),
        t_min=float(pick("t_min")),
        t_max=float(pick("t_max")),
        entropy_bound=float(entropy_bound if entropy_bound is not None else defaults.entropy_bound),
        stability_threshold=pick("stability_threshold"),
        confidence_threshold=pick("confidence_threshold"),
    )


def engine_facts(lm: SamplingModel, architecture: str, kept_prompt_bytes: int | None) -> EngineFacts:
    """``lm``'s :class:`EngineFacts`: the protocol's own members, with what only its backend knows
    (the model class's name, the kept prompts' limit in bytes, ``None`` without a prompt encoder)."""
    described = lm.describe()
    return EngineFacts(backend=lm.backend, family=lm.family, tier=lm.tier, device=str(described["device"]),
                       device_type=lm.device_type, dtype=str(described["dtype"]), architecture=architecture,
                       kept_prompt_bytes=kept_prompt_bytes)


def prompt_room(max_positions: int | None, canvas_length: int) -> int | None:
    """The largest prompt that fits beside the canvas in ``max_positions`` (``None``: unbounded)."""
    return None if max_positions is None else max(0, max_positions - canvas_length)


#: Set to 1 (or pass ``--allow-download``) to let the loaders fetch a hub model that is not cached (a Space).
ALLOW_DOWNLOAD_ENV = "PETRI_ALLOW_DOWNLOAD"


def missing_model_message(name: str, embedded_path: str) -> str:
    """The one message for a model that is not on this machine: how to get it, and the fallback."""
    return (
        f"Model {name!r} was not found: it is not a local folder and not in the local Hugging Face cache "
        f"({os.environ.get('HF_HOME', '~/.cache/huggingface')}). Petri never downloads at run time unless "
        f"asked to: pass --allow-download (or set {ALLOW_DOWNLOAD_ENV}=1, as a Hugging Face Space does) to "
        f"fetch it at start, or download it once on a machine with access, e.g. "
        f"`huggingface-cli download {name}` (about 52 GB for {REAL_MODEL_ID}), or pass the path of a "
        f"checkpoint folder. Without a model argument petri uses the embedded model in {embedded_path}."
    )


def fetch_hub_model(name: str) -> str:
    """Download hub model ``name`` into the Hugging Face cache (resuming a partial download; files
    already there are not fetched again), with huggingface_hub's progress bars on stderr, and return
    its local folder. Only called when downloads are allowed (``allow_download=True``)."""
    import sys

    from huggingface_hub import snapshot_download

    print(f"petri: fetching {name!r} from the Hugging Face Hub (--allow-download)", file=sys.stderr, flush=True)
    try:
        return str(snapshot_download(name))
    except Exception as err:  # noqa: BLE001 - network, auth, unknown repo: one message naming the cause
        raise ModelNotFoundError(f"Model {name!r} could not be downloaded from the Hugging Face Hub: {err}") from err
