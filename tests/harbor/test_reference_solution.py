"""A rollout of the task's reference solution: a fact the agent declares, result.json
records, and the row reads; never a rule keyed on an agent's name."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from contagent.agents import AGENTS
from contagent.agents.base import runs_solution
from contagent.errors import ContagentError
from contagent.export.derive import build_row, read_result
from contagent.layout import RolloutPaths


def _row(samples: Path, **result: object) -> dict[str, object]:
    paths = RolloutPaths(samples / "clean_pass")
    doc = orjson.loads(paths.result.read_bytes())
    paths.result.write_bytes(orjson.dumps({**doc, **result}))
    return build_row(paths).row


def test_only_the_agent_that_runs_the_solution_declares_it() -> None:
    assert {name for name, agent in AGENTS.items() if runs_solution(agent)} == {"oracle"}


def test_a_reference_solution_rollout_is_never_training_ready(samples: Path) -> None:
    assert _row(samples)["training_ready"] is True  # the sample itself is ready
    row = _row(samples, agent="anything", reference_solution=True)
    assert row["training_ready"] is False
    assert row["not_ready_kinds"] == ["oracle"]
    assert row["training_ready_reason"] == "the oracle ran the task's solution: no model made it"


@pytest.mark.parametrize("flag", [False, None])
def test_the_agent_name_alone_decides_nothing(samples: Path, flag: bool | None) -> None:
    row = _row(samples, agent="oracle", reference_solution=flag)
    assert row["training_ready"] is True and "oracle" not in row["not_ready_kinds"]


def test_older_result_files_without_the_fact_still_read(samples: Path, tmp_path: Path) -> None:
    doc = read_result(samples / "clean_pass" / "result.json")
    assert doc is not None and "reference_solution" not in doc
    bad = tmp_path / "result.json"
    bad.write_bytes(orjson.dumps({"rollout_id": "r", "reference_solution": "yes"}))
    with pytest.raises(ContagentError, match="reference_solution is 'yes', not bool"):
        read_result(bad)
