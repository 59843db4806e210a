"""What a pydantic model gives besides its instances: its JSON Schema, as ``schemas/`` holds
it (``$schema`` and ``$id`` set), a builder of its records as plain dicts (the fast
write paths: no model built, the keys in the model's order), and the factory and the dump
of counters a process fills itself, made without pydantic's validators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def model_schema(model: type[BaseModel], filename: str) -> dict[str, Any]:
    """``model``'s JSON Schema under the name ``filename`` (its ``$id`` is ``contagent/<filename>``)."""
    schema: dict[str, Any] = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"contagent/{filename}"
    return schema


def unvalidated(model: type[M]) -> Callable[[], M]:
    """A default factory of ``model`` with its defaults, made without validation.

    What an export makes and fills itself (its summary's counters, a document folder's
    index) is made with ``model_construct`` and written with :func:`plain_dump`, so that an
    export builds no validator or serializer: the first one a process builds loads
    pydantic's plugin machinery (``importlib.metadata``), about 0.03 s of every export's
    CPU. Input read from disk is still validated by its model.
    """

    def make() -> M:
        return model.model_construct()

    return make


def plain_dump(value: Any) -> Any:
    """``value.model_dump()`` of a model whose fields hold numbers, strings, None, lists,
    dicts and models of the same, without building the model's serializer."""
    if isinstance(value, BaseModel):
        return {name: plain_dump(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, dict):
        return {key: plain_dump(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_dump(item) for item in value]
    return value


def first_error(exc: ValidationError, whole: str) -> str:
    """``exc``'s first error in one line: the field's dotted path (``whole`` when the error
    is the record's own) and pydantic's message, less the ``Value error, `` before a
    validator's own."""
    first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or whole
    return f"{where}: {str(first['msg']).removeprefix('Value error, ')}"


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
