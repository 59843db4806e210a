"""The JSON Schemas in ``schemas/`` are generated from the pydantic models named here.

``python -m tools.schema_gen`` rewrites them; a test fails when a model and its
committed schema drift apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from contagent.core.rows import ResultRow
from contagent.model_schema import model_schema
from contagent.rawlog.policy_journal import PolicyEvent
from contagent.rawlog.records import OutcomeRecord, RequestRecord
from contagent.rawlog.result import RolloutResult
from contagent.rawlog.reward import RewardRecord
from contagent.runner.tasks.experiment import EXPERIMENT_SCHEMA_FILE, ExperimentSpec

#: schema file name -> model. Add a line when a stage adds a record type.
REGISTRY: dict[str, type[BaseModel]] = {
    "request-record.schema.json": RequestRecord,
    "outcome-record.schema.json": OutcomeRecord,
    "rollout-result.schema.json": RolloutResult,
    "reward.schema.json": RewardRecord,
    "policy-event.schema.json": PolicyEvent,
    "results-row.schema.json": ResultRow,
    EXPERIMENT_SCHEMA_FILE: ExperimentSpec,
}

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


def schema_for(filename: str) -> dict[str, Any]:
    """The JSON Schema registered as ``filename``, generated from its model."""
    return model_schema(REGISTRY[filename], filename)


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
