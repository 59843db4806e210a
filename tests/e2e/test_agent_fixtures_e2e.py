"""The vLLM tier's agent fixtures are still what the real agents send.

Records Claude Code and Codex again as ``python -m tests.vllm.record_agents`` does and
compares the fresh requests with the committed ones by shape (keys, block and item types,
roles, tool names, how many of each; not the free text, ids and secrets a run draws anew).
A new agent version that changes its wire fails here: re-record the fixtures with that
command and rerun the vLLM tier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.vllm import agent_fixtures, record_agents

pytestmark = pytest.mark.docker


def _shapes(fixture: dict[str, Any]) -> list[Any]:
    return [agent_fixtures.shape(req) for req in fixture["requests"]]


def test_recording_the_agents_again_gives_the_committed_fixtures_shapes(
    tmp_path: Path, docker_client: Any
) -> None:
    fresh = record_agents.record(tmp_path / "logs", "native")
    for agent, fixture in fresh.items():
        committed = orjson.loads(
            (agent_fixtures.FIXTURES / f"{agent.replace('-', '_')}.json").read_bytes()
        )
        assert fixture["agent_version"] == committed["agent_version"], agent
        assert _shapes(fixture) == _shapes(committed), (
            f"{agent}'s requests changed shape: run python -m tests.vllm.record_agents"
        )
