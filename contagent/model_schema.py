"""The JSON Schema of a pydantic model, as ``schemas/`` holds it (``$schema`` and ``$id`` set)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def model_schema(model: type[BaseModel], filename: str) -> dict[str, Any]:
    """``model``'s JSON Schema under the name ``filename`` (its ``$id`` is ``contagent/<filename>``)."""
    schema: dict[str, Any] = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"contagent/{filename}"
    return schema
