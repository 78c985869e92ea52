"""The record of one sampling request: what the model proposed at every step and position, and the
settings of the two built-in model families (:class:`SamplerSettings`, :class:`MaskedSettings`; their
fields' metadata makes every surface's controls, :mod:`petri.core.settings`).

A :class:`Trajectory` is the only thing that crosses from the sampler (torch) to the metrics,
tables, statistics, plots and exports (numpy / pandas only). Every array is a plain numpy array
whose shape is given below; ``S`` is the number of samples, ``T`` the largest number of denoising
steps any sample ran, ``L`` the canvas length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, cast

import numpy as np

from petri.core.recorded import RECORDED, Record, cast_record
from petri.core.settings import (
    MIN_TEMPERATURE,
    Check,
    FamilySettings,
    SettingInfo,
    Switch,
    pin_setting,
    register_settings,
    setting,
    settings_from_dict,  # noqa: F401 - read stored settings from here, as before
    steps_setting,
)

#: Filler used in ``argmax`` and ``canvas`` for steps a sample did not run (it stopped earlier than others).
NO_TOKEN = -1

#: The model families (:mod:`petri.engine.families`): the name every trajectory carries.
UNIFORM_FAMILY = "uniform-diffusion"
MASKED_FAMILY = "masked-diffusion"


@dataclass(frozen=True)
class AnchorSpan:
    """One concept pinned on one sample's canvas.

    ``token_ids`` are the concept's tokens as they appear mid-sentence; they occupy canvas
    positions ``start .. end - 1``.
    """

    concept: str
    start: int
    token_ids: tuple[int, ...]

    @property
    def end(self) -> int:
        """One past the last canvas position the anchor occupies."""
        return self.start + len(self.token_ids)

    @property
    def positions(self) -> range:
        return range(self.start, self.end)


def _temperatures_fall(settings: SamplerSettings, canvas_length: int | None) -> str | None:
    """The schedule's check (:class:`petri.core.settings.Check`): the temperature falls from t_max to t_min."""
    if settings.t_min > settings.t_max:
        return (f"t_min ({settings.t_min:g}) is greater than t_max ({settings.t_max:g}); the temperature falls from "
                "t_max to t_min, so t_min <= t_max")
    return None


@dataclass(frozen=True)
class SamplerSettings(FamilySettings):
    """DiffusionGemma's sampler settings, the uniform-diffusion family's (the model's defaults unless a
    generation config says otherwise).

    ``stability_threshold`` / ``confidence_threshold`` set to ``None`` turn adaptive stopping off,
    as in transformers (the switch ``adaptive_stop`` turns both). ``pin_thought_channel`` pins the
    instruction-tuned model's empty thought block (``<|channel>thought\\n<channel|>``) at the start of
    the canvas when the prompt uses a chat template. Each field's metadata (:func:`petri.core.settings.setting`)
    makes its API field, CLI flag and UI control.
    """

    FAMILY: ClassVar[str] = UNIFORM_FAMILY
    SWITCHES: ClassVar[tuple[Switch, ...]] = (
        Switch("adaptive_stop", ("stability_threshold", "confidence_threshold"),
               SettingInfo("the adaptive stop (false: always run every step)", label="Adaptive stop", control="adaptive",
                           order=4, row=1)),
    )
    CHECKS: ClassVar[tuple[Check, ...]] = (Check(("t_min", "t_max"), _temperatures_fall),)

    max_denoising_steps: int = steps_setting(48)
    t_min: float = setting(0.4, "the temperature of the last step (it falls linearly from t_max)", ge=MIN_TEMPERATURE,
                           le=10, order=2)
    t_max: float = setting(0.8, "the temperature of the first step", ge=MIN_TEMPERATURE, le=10, order=3)
    entropy_bound: float = setting(0.1, "the entropy budget of a step: the lowest-entropy tokens are accepted while "
                                   "their entropy sums to at most this, the rest renoised", ge=0, le=1e6,
                                   label="Entropy bound", order=1)
    stability_threshold: int | None = setting(1, "adaptive stop: the argmax canvas equals the previous this many",
                                              ge=0, le=16, label="Stability threshold (steps)", order=6, row=2)
    confidence_threshold: float | None = setting(0.005, "adaptive stop: and the mean entropy is below this", ge=0,
                                                 le=1e3, label="Confidence threshold (mean entropy)", order=7, row=2)
    pin_thought_channel: bool = pin_setting(True)


def block_count(settings: MaskedSettings, canvas_length: int) -> tuple[int, int]:
    """(the number of blocks, the block length) of a canvas of ``canvas_length`` under masked ``settings``."""
    block = settings.block_length or canvas_length
    return -(-canvas_length // block), block


def blocks_problem(settings: MaskedSettings, canvas_length: int | None) -> str | None:
    """Why ``settings`` cannot unmask a canvas of ``canvas_length`` (None: they can, or no canvas is
    known): every block needs a step."""
    if canvas_length is None:
        return None
    blocks, block = block_count(settings, canvas_length)
    if settings.max_denoising_steps < blocks:
        return (f"max_denoising_steps ({settings.max_denoising_steps}) must be at least the number of blocks "
                f"({blocks} of block_length {block} in a canvas of {canvas_length})")
    return None


#: The uniform family's fields, with their values, that masked settings stored before the families
#: had settings of their own (issue 48): every stored masked run carries them, unused, and its run id
#: hashes them, so the stored form keeps them where they were.
_CARRIED = (("t_min", 0.4), ("t_max", 0.8), ("entropy_bound", 0.1), ("stability_threshold", 1),
            ("confidence_threshold", 0.005))


@dataclass(frozen=True)
class MaskedSettings(FamilySettings):
    """The masked-diffusion family's settings (:mod:`petri.engine.families.masked`):
    ``max_denoising_steps`` unmasking steps in all (at least one per block), ``block_length``
    (``None``: the whole canvas is one block), ``unmask_threshold`` (``None``: the per-step budget,
    the masked count spread over the steps), ``temperature`` of the Gumbel-max draw (0: argmax).

    ``carried``: the uniform family's values a stored run of this family holds (:data:`_CARRIED`;
    never read by the sampler, never set by a request): ``to_dict()`` writes them where they always
    were, so stored runs and run ids are what they were before this family had settings of its own."""

    FAMILY: ClassVar[str] = MASKED_FAMILY
    CHECKS: ClassVar[tuple[Check, ...]] = (Check(("block_length", "max_denoising_steps"), blocks_problem),)

    max_denoising_steps: int = steps_setting(32, "maximum unmasking steps (at least one per block)")
    pin_thought_channel: bool = pin_setting(False)
    block_length: int | None = setting(None, "unmask the canvas in blocks of this many positions, left to right "
                                       "(none: the whole canvas is one block)", ge=1, le=1_000_000,
                                       label="Block length (blank: the whole canvas)", order=10)
    unmask_threshold: float | None = setting(None, "unmask every position at least this confident (at least one per "
                                             "step) instead of a budget per step (none: the budget)", ge=0, le=1,
                                             label="Unmask threshold (blank: a budget per step)", order=11)
    temperature: float = setting(0.0, "the Gumbel-max temperature of the predicted token (0: the argmax)", ge=0,
                                 le=10, label="Temperature (0: the argmax)", order=12)
    carried: tuple[tuple[str, Any], ...] = field(default=_CARRIED, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"max_denoising_steps": self.max_denoising_steps, **dict(self.carried),
                "pin_thought_channel": self.pin_thought_channel, "block_length": self.block_length,
                "unmask_threshold": self.unmask_threshold, "temperature": self.temperature}

    @classmethod
    def stored_keys(cls) -> tuple[str, ...]:
        return ("max_denoising_steps", *(name for name, _ in _CARRIED), "pin_thought_channel", "block_length",
                "unmask_threshold", "temperature")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> MaskedSettings:
        unknown = set(values) - set(cls.stored_keys())
        if unknown:
            raise ValueError(f"settings: unknown field(s) {sorted(unknown)}")
        carried = tuple((name, values.get(name, value)) for name, value in _CARRIED)
        return cls(**{k: v for k, v in values.items() if k not in dict(_CARRIED)}, carried=carried)


register_settings(SamplerSettings)
register_settings(MaskedSettings)


@dataclass
class Trajectory:
    """Everything one batched sampling call recorded.

    Arrays (declared once, with their dtypes and shapes, in :data:`petri.core.recorded.RECORDED`; S samples,
    T = max steps run, L = canvas length):

    - ``argmax``   int32  (S, T, L): raw argmax of the model's logits at each step, *before* any
      anchor was forced; ``NO_TOKEN`` (-1) for steps ``t >= steps[s]``.
    - ``entropy``  float32 (S, T, L): entropy (nats) of the temperature-scaled distribution the
      sampler accepts from; NaN past ``steps[s]``.
    - ``accepted`` bool   (S, T, L): whether the sampler accepted the denoiser's token at that
      step (anchor positions are always accepted); False past ``steps[s]``.
    - ``steps``    int32  (S,): denoising steps actually run by each sample.
    - ``anchor_mask`` bool (S, L): positions pinned to an anchor token.
    - ``final_ids`` int64 (S, L): the returned canvas (uniform diffusion: the last argmax, anchors
      in place; masked diffusion: the last canvas).
    - ``canvas``   int32  (S, T, L) or ``None``: the tokens on the canvas after each step, what the
      next step reads (uniform diffusion: the denoiser's draw where accepted, fresh noise where
      renoised, anchors in place; masked diffusion: the committed tokens and ``mask_id`` where still
      masked); ``NO_TOKEN`` past ``steps[s]``. ``None`` for runs stored before it was recorded.

    Lists: ``anchors[s]`` is sample ``s``'s anchors in canvas order; ``final_texts[s]`` the
    decoded canvas. ``prompt_ids`` is the encoded prompt (P,) shared by all samples.

    ``sampler`` names the code path that drew the tokens (the numbers depend on it): ``eager`` (the
    torch sampler that reproduces ``generate``), ``mlx``, ``fast`` (the GPU fast path's exact tier),
    ``fast`` with ``+compiled``, ``+sc-softmax``, ``+sc-fp8``, ``+inverse-cdf``, ``+small-batch``,
    ``+overlapped-mlp``, ``+autotuned`` for the compiled tier's levers (``petri.engine.torch.fast_tier.FastTier.fast_name``),
    and ``+fp8`` or ``+fp8-fast`` after any of these in the FP8 tier (``petri.engine.cuda.fp8_tier.fp8``), after
    ``+enc-fp8`` where its prompt encoder ran in FP8 too;
    ``unknown`` for runs stored before it was recorded.

    ``family`` names the model family (:data:`UNIFORM_FAMILY` or :data:`MASKED_FAMILY`);
    ``mask_id`` is the masked family's mask token (``None`` for uniform diffusion).
    """

    argmax: np.ndarray
    entropy: np.ndarray
    accepted: np.ndarray
    steps: np.ndarray
    anchor_mask: np.ndarray
    final_ids: np.ndarray
    anchors: list[list[AnchorSpan]]
    final_texts: list[str]
    prompt: str
    prompt_ids: np.ndarray
    settings: SamplerSettings
    model_id: str
    seed: int | None = None
    device: str = "cpu"
    timings: dict[str, float] = field(default_factory=dict)
    event: str = ""
    template: str = ""
    sampler: str = "eager"
    canvas: np.ndarray | None = None
    family: str = UNIFORM_FAMILY
    mask_id: int | None = None

    def __post_init__(self) -> None:
        s, t, length = self.argmax.shape
        sizes = {"S": s, "T": t, "L": length}
        for f in RECORDED:  # every recorded array's shape, from its declaration (the prompt's P is free)
            if f.name == "argmax" or "P" in f.shape or getattr(self, f.name) is None:
                continue
            actual, shape = getattr(self, f.name).shape, f.expected(sizes)
            if actual != shape:
                raise ValueError(f"Trajectory.{f.name} has shape {actual}, expected {shape}")
        if len(self.anchors) != s or len(self.final_texts) != s:
            raise ValueError(
                f"Trajectory has {s} samples but {len(self.anchors)} anchor lists "
                f"and {len(self.final_texts)} texts"
            )

    @property
    def n_samples(self) -> int:
        return int(self.argmax.shape[0])

    @property
    def canvas_length(self) -> int:
        return int(self.argmax.shape[2])

    def sample_argmax(self, s: int) -> np.ndarray:
        """The (steps[s], L) argmax history of sample ``s`` with the padding cut off."""
        return self.argmax[s, : int(self.steps[s])]


def check_sampler_inputs(prompt_ids, layouts) -> None:
    """What every sampler backend refuses before doing any work."""
    if not layouts:
        raise ValueError("layouts: at least one sample is needed")
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids: the prompt is empty")


class SampledRequest(Protocol):
    """What :func:`assemble_trajectory` reads of the request a record was sampled for (the engine's
    ``SampleRequest`` is one): the encoded prompt (P,), one anchor layout per sample, the settings,
    the seed and the prompt's text."""

    @property
    def prompt_ids(self) -> Sequence[int]: ...
    @property
    def layouts(self) -> Sequence[Sequence[AnchorSpan]]: ...
    @property
    def settings(self) -> Any: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def prompt_text(self) -> str: ...


def assemble_trajectory(lm: Any, record: Record, request: SampledRequest, *, timings: dict[str, float],
                        sampler: str = "eager") -> Trajectory:
    """A sampler backend's host arrays and the request they were sampled for → a :class:`Trajectory`.

    ``record``: the recorded fields of :data:`petri.core.recorded.RECORDED` by name (shapes and
    dtypes as declared there; each is cast to its dtype), all but ``prompt_ids``, which is the
    request's; ``canvas`` may be absent. The final canvases are decoded with ``lm.tokenizer`` (empty
    texts for benchmark models built without one). The family and mask token are ``lm``'s
    (``family``, ``mask_token_id``; uniform diffusion when it names none)."""
    arrays = cast_record({**record, "prompt_ids": list(request.prompt_ids)})
    final_ids = cast(np.ndarray, arrays["final_ids"])
    if lm.tokenizer is None:
        texts = [""] * len(final_ids)
    else:
        texts = lm.tokenizer.batch_decode(final_ids.tolist(), skip_special_tokens=False)
    return Trajectory(
        **arrays,  # type: ignore[arg-type]  # every required field is an array (cast_record refuses a missing one)
        anchors=[list(spans) for spans in request.layouts],
        final_texts=texts,
        prompt=request.prompt_text,
        settings=request.settings,
        model_id=lm.model_id,
        seed=request.seed,
        device=str(lm.device),
        timings=timings,
        sampler=sampler,
        family=getattr(lm, "family", UNIFORM_FAMILY),
        mask_id=getattr(lm, "mask_token_id", None),
    )
