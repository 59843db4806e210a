"""Run by the Harbor venv's Python: read each ATIF file given with Harbor's own code.

For each file: Harbor's ``Trajectory`` model validates it, writing it back drops or
changes no field, and Harbor's trace export (``extract_conversations_from_trajectory``)
gives one conversation per agent step that is not copied context, for the trajectory
and each embedded subagent. Prints one JSON object: file -> "ok" or what went wrong.
This file imports nothing of contagent (the Harbor venv does not install it).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from harbor.models.trajectories import Trajectory
from harbor.utils.traces_utils import extract_conversations_from_trajectory

RUN = {
    "agent_name": "-",
    "model_name": "-",
    "model_provider": "-",
    "start_time": "-",
    "run_id": "-",
}


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _episodes(doc: dict[str, Any]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trajectory.json"
        path.write_text(json.dumps(doc))
        return len(extract_conversations_from_trajectory(path, RUN, False))


def _own_agent_steps(doc: dict[str, Any]) -> int:
    return sum(1 for s in doc["steps"] if s["source"] == "agent" and not s.get("is_copied_context"))


def check(path: Path) -> str:
    doc = json.loads(path.read_text())
    try:
        trajectory = Trajectory.model_validate(doc)
    except ValueError as exc:
        return f"Trajectory rejects it: {' '.join(str(exc).split())[:500]}"
    # both sides without nulls: Harbor keeps a null inside a free-form dict (``extra``),
    # which drops or changes nothing
    if _without_none(trajectory.to_json_dict(exclude_none=True)) != _without_none(doc):
        return "Trajectory drops or changes fields"
    for part in [doc, *doc.get("subagent_trajectories", [])]:
        got, want = _episodes(part), _own_agent_steps(part)
        if got != want:
            return f"trace export gives {got} conversations for {want} agent steps"
    return "ok"


if __name__ == "__main__":
    print(json.dumps({name: check(Path(name)) for name in sys.argv[1:]}))
