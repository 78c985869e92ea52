"""A third model family, made as a new family is made: this one module (its settings dataclass, its
step, its model and its loader) and one ``register_family(TOY)`` call, which
``tests/engine/test_family_registry.py`` makes. Nothing in ``petri/`` names it.

Toy diffusion reads a masked LM's predictions, as masked diffusion does, but unmasks the canvas left
to right, the ``stride`` leftmost masked positions a step (their argmax). Its checkpoint is a folder
whose ``config.json`` has ``model_type`` ``petri_toy`` and names the masked LM it reads (``base``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

import torch

from petri.core.settings import Check, FamilySettings, pin_setting, setting, steps_setting
from petri.engine.families.masked import MaskedLoadedModel, load_masked_model
from petri.engine.families.registry import Family
from petri.engine.torch.array_ops import token_entropy

TOY_FAMILY = "toy-diffusion"
MODEL_TYPE = "petri_toy"


def _covers_the_canvas(settings: ToySettings, canvas_length: int | None) -> str | None:
    if canvas_length is not None and settings.stride * settings.max_denoising_steps < canvas_length:
        return (f"stride ({settings.stride}) times max_denoising_steps ({settings.max_denoising_steps}) leaves "
                f"part of the {canvas_length}-position canvas masked")
    return None


@dataclass(frozen=True)
class ToySettings(FamilySettings):
    """Toy diffusion's settings: every surface's controls are made from this dataclass."""

    FAMILY: ClassVar[str] = TOY_FAMILY
    CHECKS: ClassVar[tuple[Check, ...]] = (Check(("stride", "max_denoising_steps"), _covers_the_canvas),)

    max_denoising_steps: int = steps_setting(16)
    pin_thought_channel: bool = pin_setting(False)
    stride: int = setting(4, "positions unmasked a step, left to right", ge=1, le=64, label="Stride", order=10)


class ToyScheduler:
    """The step: the ``stride`` leftmost masked positions take their argmax; a sample finishes when
    nothing is masked."""

    def __init__(self, settings: ToySettings, mask_id: int, anchor_mask, anchor_ids):
        self.stride, self.mask_id = settings.stride, mask_id
        self.max_steps, self.can_stop, self.model_input = settings.max_denoising_steps, True, None
        self.canvas = torch.where(anchor_mask, anchor_ids, torch.full_like(anchor_ids, mask_id))
        self.finished = ~(self.canvas == mask_id).any(-1)

    @property
    def final_ids(self):
        return self.canvas

    def step(self, logits, index: int):
        logits = logits.float()
        raw_argmax = torch.argmax(logits, dim=-1)
        masked = self.canvas == self.mask_id
        accepted = masked & (masked.cumsum(-1) <= self.stride)
        self.canvas = torch.where(accepted, raw_argmax, self.canvas)
        self.finished = ~(self.canvas == self.mask_id).any(-1)
        return raw_argmax, token_entropy(logits), accepted

    def state(self) -> list:
        return [self.canvas, self.finished]


@dataclass
class ToyLoadedModel(MaskedLoadedModel):
    """A masked LM sampled by toy diffusion's step (its registration's ``step``)."""

    family = TOY_FAMILY
    tier = "toy"

    def default_settings(self) -> ToySettings:
        return ToySettings()


def toy_of(lm: MaskedLoadedModel) -> ToyLoadedModel:
    """The masked model ``lm`` as a toy-diffusion model."""
    return ToyLoadedModel(**{f.name: getattr(lm, f.name) for f in fields(lm)})


def load_toy(source: str, model_id: str, device, dtype, trust_remote_code: bool = False) -> ToyLoadedModel:
    """The loader: the masked LM the checkpoint's ``config.json`` names (``base``)."""
    base = json.loads((Path(source) / "config.json").read_text())["base"]
    return toy_of(load_masked_model(base, model_id, device, dtype, trust_remote_code=trust_remote_code))


def write_toy_checkpoint(folder: Path, base: str | Path) -> Path:
    """A toy-diffusion checkpoint folder reading the masked LM in ``base``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": MODEL_TYPE, "base": str(base)}))
    return folder


#: The one registration (``register_family(TOY)``).
TOY = Family(ToySettings, (MODEL_TYPE,), load_toy, ToyScheduler)
