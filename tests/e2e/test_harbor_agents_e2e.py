"""OpenHands, mini-swe-agent and Claude Code layered onto a Harbor task's own image.

Codex and the oracle have their own end-to-end tests; here the other three agents
each run the same task in one run: a derived image per agent, the hidden tests out
of reach, the verifier's reward, and rows that export and validate.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contagent.agents import AGENTS
from contagent.layout import RunPaths
from contagent.runner.images.agent_image import DERIVED_REPO, gc_images
from contagent.runner.summary import RunSummary
from contagent.testing.llm_stub import Reply, RunningStub, Script, StubRequest, ToolCall
from contagent.testing.messages_moves import is_messages
from contagent.testing.players import (
    CLAUDE_CODE_TOOL,
    FINISH,
    claude_code_outputs,
    terminal,
    tool_outputs,
)
from tests.e2e.test_harbor_e2e import MOVES, SECRET, TASKS
from tests.helpers import cli_export_and_validate

pytestmark = pytest.mark.docker

AGENT_NAMES = ("openhands", "mini-swe-agent", "claude-code")


def _tool_names(req: StubRequest) -> set[str]:
    return {t.get("function", {}).get("name") for t in req.json.get("tools") or []}


def harbor_player(req: StubRequest) -> Reply:
    """Each agent's model: try to read the hidden tests, write the greeting, then finish."""
    if is_messages(req) or CLAUDE_CODE_TOOL in _tool_names(req):  # Claude Code, either route
        outputs = claude_code_outputs(req)
        if len(outputs) < len(MOVES):
            bash = ToolCall("Bash", {"command": MOVES[len(outputs)], "description": "a step"})
            return Reply(content="Next step.", tool_calls=[bash])
        return Reply(content="Wrote /app/hello.txt.")
    outputs = tool_outputs(req)
    if _tool_names(req) == {"bash"}:  # mini-swe-agent
        command = (
            MOVES[len(outputs)]
            if len(outputs) < len(MOVES)
            else ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
        )
        return Reply(content="Next step.", tool_calls=[ToolCall("bash", {"command": command})])
    return terminal(MOVES[len(outputs)]) if len(outputs) < len(MOVES) else FINISH


def _seen(req: StubRequest) -> list[str]:
    return claude_code_outputs(req)  # Messages tool results, or a chat request's tool messages


def test_every_agent_runs_a_harbor_task_in_its_own_image_without_seeing_its_tests(
    tmp_path: Path,
    docker_client: Any,
    owner: str,
    stub_factory: Callable[[Script], RunningStub],
    run: Callable[..., RunSummary],
) -> None:
    for name in AGENT_NAMES:
        docker_client.images.get(AGENTS[name].image)
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS / "hello-dockerfile", tasks / "hello-dockerfile")
    stub = stub_factory(harbor_player)
    summary = run(stub, tasks, agents=AGENT_NAMES)
    assert summary.problems == [] and summary.exit_code == 0, summary.exit_reason()
    by_agent = {r.agent: r for r in summary.results}
    assert set(by_agent) == set(AGENT_NAMES)
    for name, result in by_agent.items():
        assert result.status == "passed" and result.reward == 1.0, (name, result.error)
        assert result.image is not None and result.image.startswith(f"{DERIVED_REPO}:{name}-")
    posts = [r for r in stub.requests if r.method == "POST"]
    first_outputs = [seen[0] for r in posts if (seen := _seen(r))]
    assert first_outputs and all("No such file" in text for text in first_outputs)
    assert not any(SECRET in text for r in posts for text in _seen(r))

    rows = cli_export_and_validate(RunPaths(tmp_path / "logs").rollouts_dir, tmp_path / "export")
    assert set(rows) == {f"hello-dockerfile__{name}" for name in AGENT_NAMES}
    for rollout_id, row in rows.items():
        assert row["passed"] is True and row["reward"] == 1.0, rollout_id
        assert row["training_ready"] is True, (rollout_id, row["training_ready_reason"])
    removed = gc_images(docker_client, owner)
    assert {r.image for r in summary.results} <= set(removed)
