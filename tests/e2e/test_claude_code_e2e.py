"""Claude Code end to end: the real CLI in its image, against the scripted Messages model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent.agents.claude_code import AGENT as CLAUDE_CODE
from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.testing.players import claude_code, seen_secrets
from tests.helpers import cli, read_rows

pytestmark = pytest.mark.docker

VERSION = "2.1.332"


@pytest.fixture(scope="module")
def claude_image(docker_client: Any) -> str:
    try:
        docker_client.images.get(CLAUDE_CODE.image)
    except Exception:
        pytest.fail(f"image {CLAUDE_CODE.image} missing: run scripts/build-images.sh")
    return CLAUDE_CODE.image


def test_seed_experiment_with_claude_code_exports_training_ready_and_validates(
    tmp_path: Path, stub_factory: Any, run_id: str, claude_image: str
) -> None:
    stub = stub_factory(claude_code)
    # the native route, so that the stand-in sees Claude Code's own wire (the token route's
    # run is test_token_route_e2e's)
    proc = cli(
        "run", "--served-model-name", "stub-model", "--vllm-url", stub.url, "--experiment", "exp_001",
        "--agent", "claude-code", "--temperature", "0.3", "--max-iterations", "10",
        "--messages-route", "native",
        "--log-dir", str(tmp_path / "logs"), "--run-id", run_id, "--timeout", "300",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed 1/1" in proc.stderr
    notices = [line for line in proc.stderr.splitlines() if "cannot honour" in line]
    assert len(notices) == 1, proc.stderr
    assert notices[0].endswith("claude-code cannot honour --temperature: it runs without them")

    paths = RunPaths(tmp_path / "logs")
    result = RolloutResult.model_validate_json(paths.rollout("exp_001").result.read_bytes())
    assert result.status == "passed", result.error
    assert (result.agent, result.agent_version) == ("claude-code", VERSION)
    assert result.stop_condition == "finished" and result.iterations == 3
    assert result.skills_loaded == ["linux-networking"]
    assert result.image == claude_image

    # It reached nothing but its proxy route, with Claude Code's own wire.
    posts = [r for r in stub.requests if r.method == "POST"]
    assert {r.path for r in posts} == {"/v1/messages?beta=true"}
    assert all(r.json["stream"] is True and r.json["model"] == "stub-model" for r in posts)
    assert posts[0].headers.get("anthropic-version") == "2023-06-01"
    assert b"linux-networking" in posts[0].body  # the skill Claude Code found, told to the model
    assert len(seen_secrets(stub.requests)) == 1
    events = [orjson.loads(line) for line in paths.log("exp_001").read_bytes().splitlines()]
    assert events[0]["type"] == "system" and events[0]["subtype"] == "init"
    assert events[-1]["type"] == "result" and events[-1]["subtype"] == "success"

    out = tmp_path / "export"
    proc = cli("export", str(paths.rollouts_dir), "--out", str(out), "--filter", "all")
    assert proc.returncode == 0, proc.stderr
    [row] = read_rows(out / "results.jsonl")
    assert row["training_ready"] is True, row["training_ready_reason"]
    assert row["passed"] is True and row["excluded"] == [] and row["branches"] == 1
    tool_outputs = [
        m["content"] for s in row["steps"] for m in s["messages"] if m["role"] == "tool"
    ]
    [secret] = seen_secrets(stub.requests)
    assert any(secret in text for text in tool_outputs)  # what Bash printed, in the conversation
    roles = [m["role"] for m in row["steps"][0]["messages"]]
    assert roles[:3] == ["system", "user", "system"]  # its system message inside `messages`
    assert {"Bash", "Read", "Edit"} <= {
        t["function"]["name"] for t in row["tools"] if "function" in t
    }
    proc = cli("validate", str(out / "results.jsonl"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_claude_code_image_holds_the_pinned_binary_only(
    docker_client: Any, claude_image: str
) -> None:
    """The image holds the pinned native binary and no Node; it starts with no network."""
    out = docker_client.containers.run(
        claude_image,
        ["sh", "-c", "claude --version; command -v node || echo no-node; test -x /opt/venv/bin/python && echo venv"],
        remove=True, network_mode="none",
    )  # fmt: skip
    assert out.decode().split() == [VERSION, "(Claude", "Code)", "no-node", "venv"]
    assert docker_client.images.get(claude_image).labels.get("contagent.agent") == "claude-code"


def test_contagent_build_builds_claude_code_s_image(docker_client: Any, claude_image: str) -> None:
    """`contagent build --agent claude-code` builds from its own Dockerfile (cached after CI's build)."""
    from tests.e2e.helpers import BASE_IMAGE

    tag = "contagent-runner-claude-code-buildtest:latest"
    proc = cli("build", "--agent", "claude-code", "--tag", tag, "--base-image", BASE_IMAGE,
               "--ca-bundle", "/etc/ssl/certs/ca-certificates.crt", timeout=1200)  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stderr[-2000:]
        said = " ".join(proc.stderr.split())  # the console may wrap the line
        assert f"built {tag}" in said and "for claude-code from" in said
        image = docker_client.images.get(tag)
        assert image.labels.get("contagent.runner-image") == "1"
        assert image.labels.get("contagent.agent") == "claude-code"
    finally:
        docker_client.images.remove(tag, force=True)


def test_the_iteration_limit_is_its_max_turns(
    tmp_path: Path, stub_factory: Any, run_id: str, claude_image: str
) -> None:
    """`--max-iterations 1` stops Claude Code after one turn: a max_iterations stop, not an
    agent error, and the export calls the rollout truncated, not training-ready."""
    stub = stub_factory(claude_code)
    proc = cli(
        "run", "--served-model-name", "stub-model", "--vllm-url", stub.url, "--experiment", "exp_001",
        "--agent", "claude-code", "--max-iterations", "1", "--log-dir", str(tmp_path / "logs"),
        "--run-id", run_id, "--timeout", "300",
    )  # fmt: skip
    paths = RunPaths(tmp_path / "logs")
    result = RolloutResult.model_validate_json(paths.rollout("exp_001").result.read_bytes())
    assert result.stop_condition == "max_iterations", (result.status, result.error, proc.stderr)
    assert result.status == "failed"  # the task was not done yet
    assert result.exit_codes is not None and result.exit_codes.agent == 0
    assert len([r for r in stub.requests if r.method == "POST"]) == 1
    out = tmp_path / "export"
    assert (
        cli("export", str(paths.rollouts_dir), "--out", str(out), "--filter", "all").returncode == 0
    )
    [row] = read_rows(out / "results.jsonl")
    assert row["truncated"] is True and row["training_ready"] is False
