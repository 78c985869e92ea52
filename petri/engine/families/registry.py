"""The model families, one registration each: what a family is to the engine and to every surface.

A :class:`Family` names its settings dataclass (:mod:`petri.core.settings`: its fields' metadata
makes the HTTP API's ``settings`` model, the CLI's flags and the UI's controls), the checkpoint
``model_type`` values it loads, its loader (a checkpoint folder → a
:class:`~petri.engine.base.SamplingModel` whose ``sample`` runs the family's step through the one
loop, :func:`petri.engine.loop.run_loop`), that step (the scheduler the loop drives) and the
backends that run it. A new family is one module (its settings, step, model and loader) plus one
call of :func:`register_family`; nothing else names it.

The two built-in families are registered below. Their hooks are ``"module:attribute"`` names,
imported when first used, so reading the registry imports no framework (the masked family's module
imports torch).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from petri.core.settings import FamilySettings, register_settings, request_fields, unregister_settings
from petri.core.trajectory import MaskedSettings, SamplerSettings

#: In ``model_types``: every ``model_type`` no family names.
ANY_MODEL_TYPE = "*"


def resolve(hook: Callable | type | str) -> Any:
    """A hook itself, or the attribute a ``"module:attribute"`` name names (imported now)."""
    if not isinstance(hook, str):
        return hook
    module, _, name = hook.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Family:
    """One model family.

    - ``settings``: its settings dataclass (a :class:`~petri.core.settings.FamilySettings`, whose
      ``FAMILY`` is the family's id);
    - ``model_types``: the checkpoint ``config.json`` ``model_type`` values it loads
      (:data:`ANY_MODEL_TYPE`: any no family names; ``None``: a checkpoint whose config cannot be read);
    - ``load``: ``load(source, model_id, device, dtype, *, trust_remote_code)`` → a loaded model;
    - ``step``: its scheduler, what :func:`petri.engine.loop.run_loop` drives each step;
    - ``backends``: the backends that run it (:mod:`petri.engine.select`).

    ``load`` and ``step`` may be ``"module:attribute"`` names (:func:`resolve`)."""

    settings: type[FamilySettings]
    model_types: tuple[str | None, ...]
    load: Callable | str
    step: type | str
    backends: tuple[str, ...] = ("torch",)

    @property
    def id(self) -> str:
        return self.settings.FAMILY

    def loader(self) -> Callable:
        return resolve(self.load)

    def scheduler(self) -> type:
        return resolve(self.step)


_FAMILIES: dict[str, Family] = {}


def _check_shared_names(family: Family) -> None:
    """A request field two families share is one field (the API has one ``settings`` model): the
    same type and bounds."""
    mine = {c.name: c for c in request_fields(family.settings)}
    for other in _FAMILIES.values():
        for theirs in request_fields(other.settings):
            ours = mine.get(theirs.name)
            if ours is not None and (ours.type, ours.optional, ours.info.ge, ours.info.le, ours.switch is None) != (
                    theirs.type, theirs.optional, theirs.info.ge, theirs.info.le, theirs.switch is None):
                raise ValueError(f"family {family.id!r}: setting {ours.name!r} differs from {other.id!r}'s of that "
                                 "name (type or bounds); a shared name is one field of the API, CLI and UI")


def register_family(family: Family) -> Family:
    """Add ``family`` to the registry (and its settings type to :mod:`petri.core.settings`'), checked:
    its settings can make every surface, its id and model types are its own, a setting it shares
    by name with another family is the same setting."""
    if family.id in _FAMILIES:
        raise ValueError(f"family {family.id!r} is already registered")
    taken = {t: f.id for f in _FAMILIES.values() for t in f.model_types}
    clash = [t for t in family.model_types if t in taken]
    if clash:
        raise ValueError(f"family {family.id!r}: model_type {clash[0]!r} is already {taken[clash[0]]!r}'s")
    _check_shared_names(family)
    register_settings(family.settings)
    _FAMILIES[family.id] = family
    return family


def unregister_family(family_id: str) -> None:
    """Remove a family registered by :func:`register_family` (a test's)."""
    _FAMILIES.pop(family_id, None)
    unregister_settings(family_id)


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order."""
    return tuple(_FAMILIES.values())


def get_family(family_id: str) -> Family:
    try:
        return _FAMILIES[family_id]
    except KeyError:
        raise ValueError(f"family: {family_id!r} is not one of {', '.join(_FAMILIES)}") from None


def family_of_settings(settings) -> Family:
    """The family whose settings ``settings`` are."""
    return get_family(type(settings).FAMILY)


def family_for_model_type(model_type: str | None) -> Family:
    """The family that loads checkpoints of ``model_type`` (None: its config could not be read)."""
    for wanted in (model_type, ANY_MODEL_TYPE):
        for family in _FAMILIES.values():
            if wanted in family.model_types:
                return family
    raise ValueError(f"model_type {model_type!r}: no registered family loads it")


#: DiffusionGemma's own step (:mod:`.uniform`); a checkpoint whose config cannot be read is tried as
#: DiffusionGemma, whose loader says what is missing.
UNIFORM = register_family(Family(
    SamplerSettings, ("diffusion_gemma", None), "petri.engine.torch.model:load_diffusion_gemma",
    "petri.engine.families.uniform:UniformDiffusionScheduler", backends=("torch", "mlx")))
#: BERT-style masked LMs, LLaDA and Dream (:mod:`.masked`): every other model type.
MASKED = register_family(Family(
    MaskedSettings, (ANY_MODEL_TYPE,), "petri.engine.families.masked:load_masked_model",
    "petri.engine.families.masked:MaskedDiffusionScheduler"))
