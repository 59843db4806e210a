"""The rollout engine on the real Docker executor: mini-swe-agent in its runner image, a
scripted LLM. One small group is delivered; a second is stopped mid-way, which leaves
nothing in Docker and its rollouts as ``infra_error`` for a resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from contagent.engine import Engine, EngineConfig, Group
from contagent.export.exporter import ExportOptions
from contagent.rawlog.result import RolloutResult
from contagent.runner.config import FINISHED_STATUSES, LlmOptions, RunConfig
from contagent.testing.llm_stub import Reply
from contagent.testing.players import mini
from tests.e2e.helpers import MODEL, REPO, chat_requests
from tests.e2e.stopping import AGENT, AGENT_IMAGE, left

pytestmark = pytest.mark.docker

SLOW = Reply(content="slow", delay=300)


def test_the_engine_delivers_a_group_from_docker_and_stopping_leaves_nothing(
    tmp_path: Path, stub_factory: Any, run_id: str, owner: str, docker_client: Any
) -> None:
    docker_client.images.get(AGENT_IMAGE)
    moves: dict[str, Any] = {"play": mini}
    stub = stub_factory(lambda req: moves["play"](req))
    logs = tmp_path / "logs"
    run = RunConfig(
        experiments_dir=REPO / "experiments", log_dir=logs, skills_dir=REPO / "skills",
        upstream_url=stub.url, llm=LlmOptions(MODEL, temperature=1.0), agents=(AGENT,),
        jobs=2, timeout_s=300, max_iterations=10, run_id=run_id, owner=owner,
    )  # fmt: skip
    config = EngineConfig(run=run, export=ExportOptions(allow_raw_logprobs=True))
    running: list[list[str]] = []

    async def main() -> Group:
        async with Engine(config) as engine:
            await engine.submit(["exp_001"], group_size=2)
            group = await asyncio.wait_for(engine.next_group(), 600)
            moves["play"] = lambda req: SLOW  # the next group's agents wait on the model
            calls = len(chat_requests(stub))
            await engine.submit(["exp_001"], group_size=2)
            while len(chat_requests(stub)) < calls + 2:
                await asyncio.sleep(0.2)
            running.append(left(docker_client, run_id))
        return group  # leaving the block stopped the engine

    group = asyncio.run(asyncio.wait_for(main(), 900))
    assert group.complete and [o.rollout_id for o in group.rollouts] == ["exp_001", "exp_001_r1"]
    assert {o.result.status for o in group.rollouts} <= FINISHED_STATUSES
    assert all(o.samples or o.no_samples for o in group.rollouts)  # samples, or why none
    assert running[0]  # the second group's containers were up when it stopped
    assert left(docker_client, run_id) == []
    for name in ("exp_001_r2", "exp_001_r3"):
        result = RolloutResult.model_validate_json(
            (logs / "rollouts" / name / "result.json").read_bytes()
        )
        assert (result.status, result.error) == ("infra_error", "engine stopped")
