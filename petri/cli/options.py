"""The sampler's command-line options: a flag per setting of every registered family, made from its
settings dataclass (:mod:`petri.core.settings`), so every setting of every family can be given on the
command line. The options that name the model to load, which the web server (``app.py``, ``petri
serve``) shares, are one layer down: :mod:`petri.app.model_options`."""

from __future__ import annotations

import argparse

from petri.core.settings import Control, FamilySettings, SettingError, apply_settings, controls
from petri.engine.families.registry import families


def sampler_controls() -> dict[str, tuple[Control, tuple[str, ...]]]:
    """Every registered family's settings and switches (:func:`petri.core.settings.controls`), each
    name once, with the families that have it: what :func:`add_sampler_arguments` makes flags of."""
    found: dict[str, tuple[Control, tuple[str, ...]]] = {}
    for family in families():
        for control in controls(family.settings):
            known, ids = found.get(control.name, (control, ()))
            found[control.name] = (known, (*ids, family.id))
    return found


def add_sampler_arguments(parser: argparse.ArgumentParser) -> None:
    """A flag per setting and switch of every registered family (:func:`sampler_controls`: the
    settings dataclasses' metadata makes them); a setting some families lack says whose it is."""
    group = parser.add_argument_group("sampler (defaults: the model's generation config)")
    every = len(families())
    for name, (control, ids) in sampler_controls().items():
        whose = "" if len(ids) == every else f"[{', '.join(ids)}] "
        if control.type is bool:
            group.add_argument(control.flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                               help=whose + control.info.help)
        else:
            group.add_argument(control.flag, dest=name, type=control.type, default=None, help=whose + control.info.help,
                               metavar=control.flag.lstrip("-").replace("-", "_").upper())


def settings_from_args(defaults: FamilySettings, args: argparse.Namespace,
                       canvas_length: int | None = None) -> FamilySettings:
    """``defaults`` (the model's) with the sampler flags the user gave
    (:func:`petri.core.settings.apply_settings`: bounds, switches, the family's checks for a canvas
    of ``canvas_length``); a flag of another family, or a value refused, raises ``ValueError``
    naming the flag."""
    controls_ = sampler_controls()
    given = {name: getattr(args, name, None) for name in controls_}
    try:
        return apply_settings(defaults, given, canvas_length)
    except SettingError as err:
        raise ValueError(f"{controls_[err.field][0].flag}: {err.message}") from None
