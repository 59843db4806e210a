"""JSON Schemas in ``schemas/`` are generated from the pydantic models here.

``python -m contagent.schema_gen`` rewrites them; a test fails when a model and
its committed schema drift apart.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

#: schema file name -> "module:Model". Add a line when a stage adds a record type.
REGISTRY: dict[str, str] = {
    "request-record.schema.json": "contagent.records:RequestRecord",
    "outcome-record.schema.json": "contagent.records:OutcomeRecord",
    "rollout-result.schema.json": "contagent.records:RolloutResult",
    "results-row.schema.json": "contagent.rows:ResultRow",
    "experiment.schema.json": "contagent.runner.experiment:ExperimentSpec",
}

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


def schema_for(filename: str) -> dict[str, Any]:
    """The JSON Schema registered as ``filename``, generated from its model."""
    module_name, _, attr = REGISTRY[filename].partition(":")
    model = getattr(importlib.import_module(module_name), attr)
    schema: dict[str, Any] = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"contagent/{filename}"
    return schema


def generate() -> dict[str, dict[str, Any]]:
    return {filename: schema_for(filename) for filename in REGISTRY}


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> int:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for filename, schema in generate().items():
        (SCHEMA_DIR / filename).write_text(render(schema))
    return 0


if __name__ == "__main__":
    sys.exit(main())
