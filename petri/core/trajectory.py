"""The record of one sampling request: what the model proposed at every step and position.

A :class:`Trajectory` is the only thing that crosses from the sampler (torch) to the metrics,
tables, statistics, plots and exports (numpy / pandas only). Every array is a plain numpy array
whose shape is given below; ``S`` is the number of samples, ``T`` the largest number of denoising
steps any sample ran, ``L`` the canvas length.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

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


@dataclass(frozen=True)
class SamplerSettings:
    """DiffusionGemma's sampler settings (the model's defaults unless a generation config says otherwise).

    ``stability_threshold`` / ``confidence_threshold`` set to ``None`` turn adaptive stopping off,
    as in transformers. ``pin_thought_channel`` pins the instruction-tuned model's empty thought
    block (``<|channel>thought\\n<channel|>``) at the start of the canvas when the prompt uses a
    chat template.
    """

    max_denoising_steps: int = 48
    t_min: float = 0.4
    t_max: float = 0.8
    entropy_bound: float = 0.1
    stability_threshold: int | None = 1
    confidence_threshold: float | None = 0.005
    pin_thought_channel: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MaskedSettings(SamplerSettings):
    """The masked-diffusion family's settings (:mod:`petri.engine.families.masked`):
    ``max_denoising_steps`` unmasking steps in all (at least one per block), ``block_length``
    (``None``: the whole canvas is one block), ``unmask_threshold`` (``None``: the per-step budget,
    the masked count spread over the steps), ``temperature`` of the Gumbel-max draw (0: argmax).
    The uniform family's fields (``t_min``, ``t_max``, ``entropy_bound``, ``stability_threshold``,
    ``confidence_threshold``) are carried, unused, so every layer reads one settings type."""

    max_denoising_steps: int = 32
    pin_thought_channel: bool = False
    block_length: int | None = None
    unmask_threshold: float | None = None
    temperature: float = 0.0


def settings_from_dict(values: dict[str, Any]) -> SamplerSettings:
    """Stored settings back as their family's type: :class:`MaskedSettings` when they have its
    fields, else :class:`SamplerSettings` (a field of neither is refused, naming it)."""
    masked_only = set(MaskedSettings.__dataclass_fields__) - set(SamplerSettings.__dataclass_fields__)
    kind = MaskedSettings if masked_only & set(values) else SamplerSettings
    unknown = set(values) - set(kind.__dataclass_fields__)
    if unknown:
        raise ValueError(f"settings: unknown field(s) {sorted(unknown)}")
    return kind(**values)


@dataclass
class Trajectory:
    """Everything one batched sampling call recorded.

    Arrays (S samples, T = max steps run, L = canvas length):

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
    and ``+fp8`` or ``+fp8-fast`` after any of these in the FP8 tier (``petri.engine.cuda.fp8``), after
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
        expected = {
            "entropy": (s, t, length),
            "accepted": (s, t, length),
            "steps": (s,),
            "anchor_mask": (s, length),
            "final_ids": (s, length),
            "canvas": (s, t, length),
        }
        for name, shape in expected.items():
            if getattr(self, name) is None:
                continue
            actual = getattr(self, name).shape
            if actual != shape:
                raise ValueError(f"Trajectory.{name} has shape {actual}, expected {shape}")
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


def assemble_trajectory(
    lm: Any,
    *,
    argmax: np.ndarray,
    entropy: np.ndarray,
    accepted: np.ndarray,
    steps: np.ndarray,
    anchor_mask: np.ndarray,
    final_ids: np.ndarray,
    canvas: np.ndarray | None = None,
    layouts: list[list[AnchorSpan]],
    prompt_ids,
    prompt_text: str,
    settings: SamplerSettings,
    seed: int | None,
    timings: dict[str, float],
    sampler: str = "eager",
) -> Trajectory:
    """A sampler backend's host arrays (shapes as in :class:`Trajectory`) and what the run was → a
    :class:`Trajectory`; the final canvases are decoded with ``lm.tokenizer`` (empty texts for
    benchmark models built without one). The family and mask token are ``lm``'s (``family``,
    ``mask_token_id``; uniform diffusion when it names none)."""
    final_ids = np.asarray(final_ids).astype(np.int64)
    if lm.tokenizer is None:
        texts = [""] * len(final_ids)
    else:
        texts = lm.tokenizer.batch_decode(final_ids.tolist(), skip_special_tokens=False)
    return Trajectory(
        argmax=np.asarray(argmax).astype(np.int32),
        entropy=np.asarray(entropy).astype(np.float32),
        accepted=np.asarray(accepted).astype(bool),
        steps=np.asarray(steps).astype(np.int32),
        anchor_mask=np.asarray(anchor_mask).astype(bool),
        final_ids=final_ids,
        anchors=[list(spans) for spans in layouts],
        final_texts=texts,
        prompt=prompt_text,
        prompt_ids=np.asarray(list(prompt_ids), dtype=np.int64),
        settings=settings,
        model_id=lm.model_id,
        seed=seed,
        device=str(lm.device),
        timings=timings,
        sampler=sampler,
        canvas=None if canvas is None else np.asarray(canvas).astype(np.int32),
        family=getattr(lm, "family", UNIFORM_FAMILY),
        mask_id=getattr(lm, "mask_token_id", None),
    )
