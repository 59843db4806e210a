"""Harbor task fields that bound or shape a rollout, on the real engine: a healthcheck that
never passes, the agent's and the verifier's timeouts, each phase's user, a storage limit.

Every task runs the oracle on the offline base image (no build, no LLM), all in one run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contagent.runner.summary import RunSummary
from contagent.testing.llm_stub import Reply, RunningStub, Script, StubRequest
from tests.harbor.helpers import write_task

pytestmark = pytest.mark.docker

#: what a phase would do if nothing bounded it
FOREVER = "sleep 60"


def _task(root: Path, toml: str, solve: str, test: str) -> Path:
    task = write_task(root, f'[environment]\ndocker_image = "contagent-base:trixie"\n{toml}')
    (task / "environment" / "Dockerfile").unlink()
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text(f"#!/bin/sh\n{solve}\n")
    (task / "tests" / "test.sh").write_text(f"#!/bin/sh\n{test}\n")
    return task


def _no_llm(req: StubRequest) -> Reply:
    raise AssertionError("the oracle asks no model")


def test_healthcheck_timeouts_users_and_storage_bound_each_rollout(
    tmp_path: Path,
    docker_client: Any,
    stub_factory: Callable[[Script], RunningStub],
    run: Callable[..., RunSummary],
) -> None:
    tasks = tmp_path / "tasks"
    reward = "echo 1 > /logs/verifier/reward.txt"
    _task(
        tasks / "never-healthy",
        f'healthcheck = {{ command = "{FOREVER}", timeout_sec = 0.5, interval_sec = 0.2, '
        "retries = 2 }\n",
        "true",
        reward,
    )
    _task(tasks / "agent-timeout", "[agent]\ntimeout_sec = 1\n", FOREVER, reward)
    _task(tasks / "verifier-timeout", "[verifier]\ntimeout_sec = 1\n", "true", FOREVER)
    _task(
        tasks / "users",
        '[agent]\nuser = "daemon"\n[verifier]\nuser = "nobody"\n',
        "id -un > /tmp/agent-user",
        'printf \'{"reward": 1, "agent_uid": %s, "verifier_uid": %s}\' '
        '"$(id -u "$(cat /tmp/agent-user)")" "$(id -u)" > /logs/verifier/reward.json',
    )
    _task(tasks / "storage", "storage_mb = 100\n", "true", reward)
    summary = run(stub_factory(_no_llm), tasks, agents=("oracle",), jobs=4)
    by_name = {r.rollout_id: r for r in summary.results}

    hc = by_name["never-healthy"]
    assert hc.status == "infra_error" and hc.exit_codes is not None
    assert hc.error == (
        "the healthcheck failed 2 times (the last timed out after 0.5 s), never healthy: sleep 60"
    )
    assert hc.exit_codes.agent is None  # the agent never started
    assert hc.timings is not None and hc.timings.setup_s is not None
    assert hc.timings.setup_s < 30  # two tries of 0.5 s, not the command's 60 s

    slow = by_name["agent-timeout"]
    assert slow.status == "timeout" and slow.stop_condition == "timeout"
    assert slow.error == "the agent ran past its 1 s limit ([agent] timeout_sec) and was stopped"
    assert slow.exit_codes is not None and slow.exit_codes.agent is None
    assert slow.timings is not None and slow.timings.agent_s is not None
    assert slow.timings.agent_s < 30

    verifier = by_name["verifier-timeout"]
    assert verifier.status == "timeout" and verifier.reward is None
    assert verifier.error == (
        "the verifier ran past its 1 s limit ([verifier] timeout_sec) and was stopped"
    )
    assert verifier.timings is not None and verifier.timings.evaluate_s is not None
    assert verifier.timings.evaluate_s < 30

    users = by_name["users"]
    assert users.status == "passed", users.error
    # daemon's and nobody's uids in Debian's base-passwd
    assert users.rewards == {"reward": 1.0, "agent_uid": 1.0, "verifier_uid": 65534.0}

    limited = [p.message for p in summary.problems if p.name == "storage"]
    if limited:  # this engine (overlay2 on extfs, say) cannot limit a container's storage
        (line,) = limited
        assert ": oracle: storage_mb = 100: this Docker engine cannot limit" in line
        assert "storage" not in by_name  # refused before any rollout
    else:
        assert by_name["storage"].status == "passed", by_name["storage"].error
        info = docker_client.info()
        assert info["Driver"] == "overlay2"
