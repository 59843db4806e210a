"""Harbor tasks end to end: the task's own image, an agent layered onto it, the oracle.

Real engine, the real Codex CLI copied into the task image, a scripted model.
The tests folder holds a secret the agent must never be able to read; the
oracle's solve.sh leaves a process behind that would mark the reward if any
process of the agent phase outlived it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent.agents import AGENTS
from contagent.layout import RunPaths
from contagent.runner.images.agent_image import DERIVED_REPO, gc_images
from contagent.runner.summary import RunSummary
from contagent.testing.llm_stub import Reply, RunningStub, Script, StubRequest, ToolCall
from contagent.testing.players import codex_outputs
from tests.harbor.helpers import write_task
from tests.helpers import cli_export_and_validate

pytestmark = pytest.mark.docker

TASKS = Path(__file__).resolve().parents[1] / "harbor" / "tasks"
#: what the agent tries: read the hidden tests, then solve the task
SECRET = "verifier-secret-7b1e9d"  # the content of tests/secret.txt, unlike any chunk id
MOVES = ("cat /tests/secret.txt; ls /tests", "echo 'hello harbor' > /app/hello.txt")


def harbor_codex(req: StubRequest) -> Reply:
    outputs = codex_outputs(req)
    if len(outputs) < len(MOVES):
        return Reply(
            content=None, tool_calls=[ToolCall("exec_command", {"cmd": MOVES[len(outputs)]})]
        )
    return Reply(content="Wrote /app/hello.txt.")


def _tasks(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "tasks"
    for name in names:
        shutil.copytree(TASKS / name, root / name)
    return root


def test_codex_runs_a_harbor_task_without_seeing_its_tests(
    tmp_path: Path,
    docker_client: Any,
    owner: str,
    stub_factory: Callable[[Script], RunningStub],
    run: Callable[..., RunSummary],
) -> None:
    docker_client.images.get(AGENTS["codex"].image)
    stub = stub_factory(harbor_codex)
    summary = run(stub, _tasks(tmp_path, "hello-dockerfile"), agents=("codex",))
    (result,) = summary.results
    assert result.status == "passed", result.error
    assert result.reward == 1.0 and result.rewards == {"reward": 1.0}
    assert result.image is not None and result.image.startswith(f"{DERIVED_REPO}:codex-")
    # the skills of the task image's skills_dir (a folder without SKILL.md is none)
    assert result.skills_loaded == ["greeting"] and result.reference_solution is False
    seen = [o for r in stub.requests if r.method == "POST" for o in codex_outputs(r)]
    assert len(seen) >= 2
    assert "No such file" in seen[0] and SECRET not in "".join(seen), seen[0]

    paths = RunPaths(tmp_path / "logs")
    out = tmp_path / "export"
    rows = cli_export_and_validate(paths.rollouts_dir, out, "prime-sft", "atif")
    (row,) = rows.values()
    assert row["training_ready"] is True, row["training_ready_reason"]
    assert row["passed"] is True and row["reward"] == 1.0
    doc = orjson.loads((out / "atif" / f"{row['rollout_id']}.json").read_bytes())
    assert doc["agent"]["name"] == "codex" and doc["agent"]["version"] != "unknown"
    assert doc["extra"]["reward"] == 1.0 and doc["extra"]["passed"] is True
    agent_steps = [s for s in doc["steps"] if s["source"] == "agent"]
    assert len(agent_steps) == len(row["steps"]) and all("metrics" in s for s in agent_steps)

    # the derived image is cached for this owner, and `gc --images` removes it
    assert docker_client.images.list(
        name=DERIVED_REPO, filters={"label": f"contagent.owner={owner}"}
    )
    removed = gc_images(docker_client, owner)
    assert result.image in removed
    assert not docker_client.images.list(filters={"label": f"contagent.owner={owner}"})


def test_oracle_solves_without_an_llm_and_is_never_training_ready(
    tmp_path: Path,
    docker_client: Any,
    owner: str,
    stub_factory: Callable[[Script], RunningStub],
    run: Callable[..., RunSummary],
) -> None:
    stub = stub_factory(harbor_codex)
    stub.stop()  # no LLM server at all: the oracle needs none, and no preflight asks one
    summary = run(stub, _tasks(tmp_path, "hello-dockerfile", "reward-json"), agents=("oracle",))
    by_name = {r.rollout_id: r for r in summary.results}
    hello, graded = by_name["hello-dockerfile"], by_name["reward-json"]
    assert hello.status == "passed" and hello.reward == 1.0, hello.error
    assert graded.status == "failed" and graded.reward == 0.5  # passed only at reward 1
    assert graded.rewards == {"reward": 0.5, "format": 1.0, "answer_len": 2.0}
    assert stub.requests == []
    assert hello.llm is None and graded.agent == "oracle"
    assert hello.reference_solution is True and hello.skills_loaded is None

    paths = RunPaths(tmp_path / "logs")
    out = tmp_path / "export"
    rows = cli_export_and_validate(paths.rollouts_dir, out, "atif")
    index = orjson.loads((out / "atif" / "_index.json").read_bytes())
    assert index["written"] == []
    assert {e["rollout_id"] for e in index["left_out"]} == {"hello-dockerfile", "reward-json"}
    assert all("oracle" in e["reason"] for e in index["left_out"])
    assert set(rows) == {"hello-dockerfile", "reward-json"}
    for row in rows.values():
        assert row["training_ready"] is False and "oracle" in row["not_ready_kinds"]
    gc_images(docker_client, owner)


def test_a_base_the_agent_cannot_run_on_and_an_unenforceable_limit_are_one_line_errors(
    tmp_path: Path,
    docker_client: Any,
    owner: str,
    stub_factory: Callable[[Script], RunningStub],
    run: Callable[..., RunSummary],
) -> None:
    docker_client.images.get(AGENTS["mini-swe-agent"].image)
    tasks = tmp_path / "tasks"
    own_venv = write_task(tasks / "own-venv", "[environment]\nbuild_timeout_sec = 120\n")
    (own_venv / "environment" / "venv").mkdir()
    (own_venv / "environment" / "venv" / "marker").write_text("the task's own\n")
    (own_venv / "environment" / "Dockerfile").write_text(
        "FROM contagent-base:trixie\nCOPY venv /opt/venv\n"
    )
    # a base with a static shell and no C library (Alpine's case: no glibc)
    static = write_task(tasks / "no-glibc", "[environment]\nbuild_timeout_sec = 120\n")
    busybox = Path("/bin/busybox")
    assert busybox.is_file(), (
        "the no-glibc task needs a static busybox: apt-get install busybox-static"
    )
    shutil.copy(busybox, static / "environment" / "busybox")
    (static / "environment" / "Dockerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
    )
    broken = write_task(tasks / "broken", "[environment]\nbuild_timeout_sec = 60\n")
    (broken / "environment" / "Dockerfile").write_text("FROM contagent-base:trixie\nRUN exit 3\n")
    storage = write_task(
        tasks / "storage",
        '[environment]\ndocker_image = "contagent-base:trixie"\nstorage_mb = 100\n',
    )
    (storage / "environment" / "Dockerfile").unlink()
    stub = stub_factory(harbor_codex)
    summary = run(stub, tasks, agents=("mini-swe-agent",))
    # refused when planned, once per task and agent: no rollout of it ever starts
    problems = {p.name: p.message for p in summary.problems}
    assert problems["own-venv"] == (
        f"{tasks / 'own-venv'}: mini-swe-agent: the task image has its own /opt/venv, "
        "where the agent's runtime goes"
    )
    assert problems["no-glibc"] == (
        f"{tasks / 'no-glibc'}: mini-swe-agent: the task image has no glibc, which the "
        "agent's runtime needs"
    )
    # locally a task image that does not build refuses that task alone
    assert problems["broken"].startswith(f"{tasks / 'broken'}: mini-swe-agent: image build failed:")
    assert "\n" not in problems["broken"]
    assert not {"own-venv", "no-glibc", "broken"} & {r.rollout_id for r in summary.results}
    if "storage" in problems:  # this engine (overlay2 on extfs) has no such limit
        assert problems["storage"].startswith(
            f"{tasks / 'storage'}: mini-swe-agent: storage_mb = 100: this Docker engine "
            "cannot limit a container's storage ("
        )
        assert summary.results == []
        assert [r for r in stub.requests if r.method == "POST"] == []  # no agent asked
    else:
        (limited,) = summary.results
        assert limited.exit_codes is not None and limited.exit_codes.evaluate == 0
    assert summary.exit_code == 1
    gc_images(docker_client, owner)


#: the sandbox's network interfaces besides loopback: one per network it is on
ROUTES = "ls /sys/class/net | grep -vc '^lo$'"


def _network_task(root: Path, verifier_network: str) -> Path:
    task = write_task(
        root,
        '[environment]\ndocker_image = "contagent-base:trixie"\n'
        f'[verifier]\nnetwork_mode = "{verifier_network}"\n',
    )
    (task / "environment" / "Dockerfile").unlink()
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text(f"#!/bin/sh\n{ROUTES} > /tmp/agent-routes\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/sh\n"
        f'printf \'{{"reward": 1, "agent": %s, "verifier": %s}}\' '
        f'"$(cat /tmp/agent-routes)" "$({ROUTES})" > /logs/verifier/reward.json\n'
    )
    return task


@pytest.mark.parametrize("allow_internet", [False, True])
def test_each_phase_gets_its_own_network(
    tmp_path: Path,
    docker_client: Any,
    stub_factory: Callable[[Script], RunningStub],
    run: Callable[..., RunSummary],
    allow_internet: bool,
) -> None:
    tasks = tmp_path / "tasks"
    _network_task(tasks / "public-verifier", "public")
    _network_task(tasks / "offline-verifier", "no-network")
    summary = run(
        stub_factory(harbor_codex), tasks, agents=("oracle",), allow_internet=allow_internet
    )
    by_name = {r.rollout_id: r.rewards for r in summary.results}
    # the agent: the proxy's internal network, plus a route out with --allow-internet; the
    # verifier: never the proxy's network, a route out only when its task gives it one
    agent_nets = 2.0 if allow_internet else 1.0
    assert by_name["public-verifier"] == {"reward": 1.0, "agent": agent_nets, "verifier": 1.0}
    assert by_name["offline-verifier"] == {"reward": 1.0, "agent": agent_nets, "verifier": 0.0}
