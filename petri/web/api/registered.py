"""A pydantic annotation that validates, serialises and documents with the model of what is
registered *now*, so a registry entry added after import (a family's settings, a per-sample metric)
is a field of the API without another file touched.

``Annotated[Static, registered(model_now)]``: ``Static`` is ``model_now()`` at import (the built-in
entries); while ``model_now()`` is still ``Static`` nothing changes, else a value validates into
``model_now()`` (``convert`` first turns an instance of another generated model into its fields),
serialises as that model's instance, and the OpenAPI schema shows that model under ``Static``'s name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic_core import core_schema


def registered(model_now: Callable[[], type[BaseModel]],
               convert: Callable[[Any], Any] = lambda value: value) -> type:
    """The annotation marker for a field whose model is ``model_now()`` (see the module docstring)."""
    static = model_now()

    def validate(value, handler):
        model = model_now()
        if model is static:
            return handler(value)
        if isinstance(value, model):
            return value
        if isinstance(value, BaseModel):
            value = convert(value)
        return model.model_validate(value)

    class Registered:
        @classmethod
        def __get_pydantic_core_schema__(cls, source, handler):
            return core_schema.no_info_wrap_validator_function(validate, handler(source))

        @classmethod
        def __get_pydantic_json_schema__(cls, schema, handler):
            reference = handler(schema)  # to the static model's definition: the current model's fields
            model = model_now()
            if model is not static:
                definition = handler.resolve_ref_schema(reference)
                definition.clear()
                definition.update(handler(model.__pydantic_core_schema__))
            return reference

    return Registered

