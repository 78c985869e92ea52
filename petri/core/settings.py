"""A model family's settings, described once, so every surface can be made from them.

A family's settings are a frozen dataclass deriving from :class:`FamilySettings`; each field that a
user may set is declared with :func:`setting` (its default, help text, bounds and how a surface
shows it), and the class names its family (``FAMILY``), its switches (:class:`Switch`: one boolean
that turns several settings off or on, as ``adaptive_stop`` does DiffusionGemma's adaptive stop) and
its checks across fields (:class:`Check`: ``t_min <= t_max``). From that alone:

- :func:`request_fields` gives the fields of a request, in the stored order, each switch after the
  last field it turns (the HTTP API's ``settings`` model, :mod:`petri.web.api.settings`);
- :func:`controls` gives the same in the order the surfaces show them (the CLI's flags,
  :mod:`petri.cli.options`; the UI's controls, :mod:`petri.web.ui.dish_tab.dish_controls`);
- :func:`apply_settings` applies what a request gave to a model's defaults, checking bounds, the
  family's switches and checks, and refusing a setting of another family, naming the field
  (:class:`SettingError`); the API, the CLI and the UI all go through it.

A family's settings must have ``max_denoising_steps`` and ``pin_thought_channel`` (the loop and the
dish planner read them); their stored form is ``to_dict()`` and :func:`settings_from_dict` reads it
back as the family's type (the families' types are registered here by :func:`register_settings`,
which :func:`petri.engine.families.registry.register_family` calls).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar

#: Most denoising steps a request may ask for (the API, the CLI and the UI alike).
MAX_STEPS = 256
#: Largest seed a request may give (the API, the CLI and the UI alike; 0 is the smallest): 2**32 - 1,
#: the range numpy's ``np.random.seed`` takes and every seeded generator here accepts with room to
#: spare (``torch.manual_seed`` and ``mx.random.seed`` take 64 bits, ``numpy.random.default_rng`` and
#: ``random.Random`` any size), so the seeds derived from it (``seed + 1`` for a probe's further draws,
#: ``seed + r`` for its repeats) stay valid too.
MAX_SEED = 2**32 - 1
#: Lowest sampler temperature: the logits are divided by it, and a smaller one overflows to inf/NaN
#: (at once in fp16/bf16).
MIN_TEMPERATURE = 0.01
#: The key of a setting's :class:`SettingInfo` in its dataclass field's metadata.
SETTING = "petri"
#: The fields every family's settings have.
REQUIRED_FIELDS = ("max_denoising_steps", "pin_thought_channel")


@dataclass(frozen=True)
class SettingInfo:
    """How a setting is described and shown. ``help``: its one-line meaning (the API's description,
    the CLI's help); ``ge`` / ``le``: its bounds (None: none); ``label``: the UI's label (default:
    the name); ``control``: the UI control's name, which its element id is made of (default: the
    name); ``flag``: the CLI flag (default: ``--`` and the name with dashes; a boolean's flag turns
    it on, ``--no-…`` off); ``widget``: ``"slider"`` for a bounded count, else by type (a number box
    or a checkbox); ``order``: its place among the family's controls and flags; ``row``: the UI row."""

    help: str
    ge: int | float | None = None
    le: int | float | None = None
    label: str = ""
    control: str = ""
    flag: str = ""
    widget: str = ""
    order: int = 50
    row: int = 0


def setting(default: Any, help: str, **info: Any) -> Any:
    """A settings dataclass field a user may set: ``default`` and its :class:`SettingInfo`."""
    return field(default=default, metadata={SETTING: SettingInfo(help, **info)})


def steps_setting(default: int, help: str = "maximum denoising steps") -> Any:
    """``max_denoising_steps``, which every family has, declared as every family declares it (one
    field of the API, the CLI and the UI: the same bounds and control everywhere)."""
    return setting(default, help, ge=1, le=MAX_STEPS, label="Max denoising steps", control="steps", flag="--steps",
                   widget="slider", order=0)


def pin_setting(default: bool) -> Any:
    """``pin_thought_channel``, which every family has, declared as every family declares it."""
    return setting(default, "pin the empty thought block at the canvas start (chat-template models)",
                   label="Pin the empty thought block (chat-template models)", control="pin_thought",
                   flag="--thought-channel", order=5, row=1)


@dataclass(frozen=True)
class Switch:
    """A boolean request field ``name`` that turns the settings ``fields`` off (False: each None) or
    on (True, where the first is None: each the value given, else the class default); ``info`` as
    for a setting (no bounds)."""

    name: str
    fields: tuple[str, ...]
    info: SettingInfo


@dataclass(frozen=True)
class Check:
    """A check across ``fields``: ``problem(settings, canvas_length)`` says what is wrong (None: all
    is well; ``canvas_length`` is None where no model is at hand). The error names the first of
    ``fields`` that the request gave, else the last."""

    fields: tuple[str, ...]
    problem: Callable[[Any, int | None], str | None]


class SettingError(ValueError):
    """A setting refused: ``field`` names it (a request field: a setting or a switch)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class FamilySettings:
    """The base of every family's settings dataclass: ``FAMILY`` names the family, ``SWITCHES`` and
    ``CHECKS`` are its switches and checks; ``to_dict()`` is the stored form, ``from_dict`` reads it
    back, ``stored_keys()`` are its keys."""

    FAMILY: ClassVar[str] = ""
    SWITCHES: ClassVar[tuple[Switch, ...]] = ()
    CHECKS: ClassVar[tuple[Check, ...]] = ()
    # Declared for the type checker only (no value is bound here): every subclass is a dataclass
    # (check_settings_class) with the REQUIRED_FIELDS among its fields.
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    max_denoising_steps: int
    pin_thought_channel: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def stored_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]):
        unknown = set(values) - set(cls.stored_keys())
        if unknown:
            raise ValueError(f"settings: unknown field(s) {sorted(unknown)}")
        return cls(**values)


@dataclass(frozen=True)
class Control:
    """One field of a family's requests, as every surface shows it: a setting (``switch`` None) or
    a switch; ``type`` is ``int``, ``float`` or ``bool``; ``optional``: None is one of its values."""

    name: str
    type: type
    optional: bool
    default: Any
    info: SettingInfo
    switch: Switch | None = None

    @property
    def control(self) -> str:
        """The UI control's name (its element id is ``<prefix>-`` and this name with dashes)."""
        return self.info.control or self.name

    @property
    def flag(self) -> str:
        return self.info.flag or "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        return self.info.label or self.name


def _value_type(hint) -> tuple[type, bool]:
    """(int / float / bool, whether None is allowed) of a field's type hint."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = len(args) < len(typing.get_args(hint))
    kind = args[0] if optional and len(args) == 1 else hint
    if kind not in (int, float, bool):
        raise TypeError(f"a setting is an int, a float or a bool (or one of them or None), not {hint!r}")
    return kind, optional


def request_fields(cls) -> tuple[Control, ...]:
    """``cls``'s settings and switches in the stored order, each switch after the last field it turns."""
    hints = typing.get_type_hints(cls)
    found: list[Control] = []
    for f in fields(cls):
        if SETTING in f.metadata:
            kind, optional = _value_type(hints[f.name])
            found.append(Control(f.name, kind, optional, f.default, f.metadata[SETTING]))
    for switch in cls.SWITCHES:
        after = max(i for i, c in enumerate(found) if c.name in switch.fields)
        found.insert(after + 1, Control(switch.name, bool, False, True, switch.info, switch))
    return tuple(found)


def controls(cls) -> tuple[Control, ...]:
    """``cls``'s settings and switches in the order the CLI and the UI show them (``order``, then
    the stored order)."""
    found = request_fields(cls)
    return tuple(sorted(found, key=lambda c: (c.info.order, found.index(c))))


def check_settings_class(cls) -> None:
    """Refuse a settings class no surface could be made from, naming what is wrong."""
    if not (isinstance(cls, type) and is_dataclass(cls) and issubclass(cls, FamilySettings)):
        raise TypeError(f"{cls!r}: a family's settings are a dataclass deriving from FamilySettings")
    if not cls.FAMILY:
        raise ValueError(f"{cls.__name__}: FAMILY names the family")
    names = {c.name for c in request_fields(cls)}
    missing = [n for n in REQUIRED_FIELDS if n not in names]
    if missing:
        raise ValueError(f"{cls.__name__}: every family's settings have {', '.join(missing)}")
    for f in fields(cls):
        if f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"{cls.__name__}.{f.name}: every field has a default")
    rules: list[Switch | Check] = [*cls.SWITCHES, *cls.CHECKS]
    for rule in rules:
        unknown = [n for n in rule.fields if n not in names]
        if unknown:
            raise ValueError(f"{cls.__name__}: {rule!r} names no setting {unknown}")


def apply_settings(defaults, given: Mapping[str, Any], canvas_length: int | None = None):
    """``defaults`` (a family's settings, the model's) with the request fields ``given`` applied
    (a value None is not given): each within its bounds, then the switches, then the family's
    checks (``canvas_length``: the model's, for the checks that need it). Raises
    :class:`SettingError` naming the field, also for a field that is not this family's."""
    cls = type(defaults)
    known = {c.name: c for c in request_fields(cls)}
    given = {name: value for name, value in given.items() if value is not None}
    for name, value in given.items():
        control = known.get(name)
        if control is None:
            raise SettingError(name, f"not a setting of the model's family, {cls.FAMILY} (its settings: "
                                     f"{', '.join(known)})")
        if control.info.ge is not None and value < control.info.ge:
            raise SettingError(name, f"{value!r} is below its least value, {control.info.ge!r}")
        if control.info.le is not None and value > control.info.le:
            raise SettingError(name, f"{value!r} is above its greatest value, {control.info.le!r}")
    settings = replace(defaults, **{n: v for n, v in given.items() if known[n].switch is None})
    for switch in cls.SWITCHES:
        if given.get(switch.name) is False:
            settings = replace(settings, **{f: None for f in switch.fields})
        elif given.get(switch.name) is True and getattr(settings, switch.fields[0]) is None:
            settings = replace(settings, **{f: given.get(f, known[f].default) for f in switch.fields})
    for check in cls.CHECKS:
        message = check.problem(settings, canvas_length)
        if message:
            raise SettingError(next((f for f in check.fields if f in given), check.fields[-1]), message)
    return settings


#: The families' settings types by family id (what :func:`settings_from_dict` reads stored runs as).
_TYPES: dict[str, type[FamilySettings]] = {}


def register_settings(cls) -> type:
    """Make ``cls`` (checked by :func:`check_settings_class`) the settings type of its family."""
    check_settings_class(cls)
    known = _TYPES.get(cls.FAMILY)
    if known is not None and known is not cls:
        raise ValueError(f"family {cls.FAMILY!r} already has its settings type, {known.__name__}")
    _TYPES[cls.FAMILY] = cls
    return cls


def unregister_settings(family: str) -> None:
    _TYPES.pop(family, None)


def settings_types() -> dict[str, type]:
    """Family id → its settings type, in registration order."""
    return dict(_TYPES)


def settings_from_dict(values: Mapping[str, Any], family: str | None = None):
    """Stored settings back as their family's type: ``family``'s when it is given and known, else
    the type whose stored form has every key (the one with the fewest keys: a run stored before
    its family was recorded). A key of none is refused, naming it."""
    kind = _TYPES.get(family) if family else None
    if kind is None:
        fitting = [t for t in _TYPES.values() if set(values) <= set(t.stored_keys())]
        if not fitting:
            every = set().union(*(t.stored_keys() for t in _TYPES.values()))
            raise ValueError(f"settings: unknown field(s) {sorted(set(values) - every) or sorted(values)}")
        kind = min(fitting, key=lambda t: len(t.stored_keys()))
    return kind.from_dict(values)
