"""What a pydantic model gives besides its instances: its JSON Schema, as ``schemas/`` holds
it (``$schema`` and ``$id`` set), and a builder of its records as plain dicts (the fast
write paths: no model built, the keys in the model's order)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel


def model_schema(model: type[BaseModel], filename: str) -> dict[str, Any]:
    """``model``'s JSON Schema under the name ``filename`` (its ``$id`` is ``contagent/<filename>``)."""
    schema: dict[str, Any] = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"contagent/{filename}"
    return schema


_MISSING: Any = object()


def dict_builder(model: type[BaseModel]) -> Callable[..., dict[str, Any]]:
    """The dict builder of ``model``'s records: keywords in, the model's fields out in its
    order, each default filled in; an unknown or a missing required field raises TypeError."""
    template: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    for name, info in model.model_fields.items():
        if info.default_factory is not None:
            factories[name] = info.default_factory  # type: ignore[assignment]
        required = info.is_required() or name in factories
        template[name] = _MISSING if required else info.default
    size, made = len(template), tuple(factories.items())

    def build(**fields: Any) -> dict[str, Any]:
        record = {**template, **fields}
        for name, factory in made:
            if record[name] is _MISSING:
                record[name] = factory()
        if len(record) != size or _MISSING in record.values():
            _refuse(fields)
        return record

    def _refuse(fields: dict[str, Any]) -> None:
        unknown = sorted(fields.keys() - template.keys())
        if unknown:
            raise TypeError(f"{model.__name__} has no field {', '.join(unknown)}")
        missing = [name for name, value in template.items() if value is _MISSING]
        missing = [name for name in missing if name not in fields and name not in factories]
        raise TypeError(f"{model.__name__} needs {', '.join(missing)}")

    build.__doc__ = f"A :class:`{model.__name__}` as a plain dict (its fields, in its order)."
    return build
