"""The ``settings`` of a request (``POST /api/seed``, ``POST /api/study``), made from the families'
settings dataclasses: one pydantic model, ``SettingsIn``, with every request field of every
registered family (:func:`petri.core.settings.request_fields`: each optional, its type, bounds and
help from the field's metadata; a name two families share is one field), unknown fields refused.

:meth:`SettingsBase.apply` applies a request's settings to the served model's defaults
(:func:`petri.core.settings.apply_settings`): a setting of another family, a value out of bounds
or a failed check across fields (``t_min <= t_max``; a masked canvas's blocks each need a step) is
a :class:`~petri.web.errors.FieldError` at ``["body", "settings", <field>]``.

A family registered after this module was imported is a field of the model too: :data:`Settings`
(the request models' annotation) validates with :func:`settings_model`, the model of the families
registered now, and the OpenAPI schema shows that model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from petri.core.settings import SettingError, apply_settings, request_fields
from petri.engine.families.registry import families
from petri.web.api.registered import registered
from petri.web.errors import FieldError

DOC = "Sampler settings; every field is optional and defaults to the model's generation config."


class SettingsBase(BaseModel):
    """What every generated ``SettingsIn`` is: no unknown fields, no NaN or infinity, no coercion."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    def given(self) -> dict[str, Any]:
        """The fields the request gave (None: not given)."""
        return {name: value for name in type(self).model_fields if (value := getattr(self, name)) is not None}

    def apply(self, defaults, canvas_length: int | None = None):
        """``defaults`` (the model's) with every given field replaced, the family's switches and
        checks applied (``canvas_length``: the model's, for the checks that need it)."""
        try:
            return apply_settings(defaults, self.given(), canvas_length)
        except SettingError as err:
            raise FieldError(["body", "settings", err.field], err.message) from None


_MODELS: dict[tuple[type, ...], type[SettingsBase]] = {}


def settings_model() -> type[SettingsBase]:
    """``SettingsIn`` for the families registered now (made once per set of families)."""
    key = tuple(f.settings for f in families())
    if key not in _MODELS:
        fields: dict[str, Any] = {}
        for family in families():
            for control in request_fields(family.settings):
                if control.name in fields:
                    continue  # the same setting (registry._check_shared_names)
                bounds: dict[str, Any] = {k: v for k, v in (("ge", control.info.ge), ("le", control.info.le)) if v is not None}
                fields[control.name] = (control.type | None, Field(None, description=control.info.help, **bounds))
        _MODELS[key] = create_model("SettingsIn", __base__=SettingsBase, __doc__=DOC, __module__=__name__, **fields)
    return _MODELS[key]


#: The model of the families registered at import (the built-in ones).
if TYPE_CHECKING:
    SettingsIn = SettingsBase  # to the type checker: the base of the model made at import
else:
    SettingsIn = settings_model()


#: The annotation of a request's ``settings``.
Settings = Annotated[SettingsIn, registered(settings_model, convert=lambda value: value.given())]
