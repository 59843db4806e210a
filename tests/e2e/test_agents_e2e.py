"""Every shipped agent, end to end: real engine, each agent's real image, scripted LLM (chat,
Responses and Messages)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent.agents import AGENTS as AGENTS_BY_NAME
from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.rawlog.stream import read_log_bytes
from contagent.testing.players import any_agent, seen_secrets
from tests.e2e.helpers import RUNNER_IMAGE
from tests.helpers import cli, read_rows

pytestmark = pytest.mark.docker

#: `contagent run` takes these agents' images by their default names (scripts/build-images.sh)
AGENT_IMAGES = {
    name: AGENTS_BY_NAME[name].image for name in ("mini-swe-agent", "codex", "claude-code")
}
AGENTS = ("openhands", "mini-swe-agent", "codex", "claude-code")


@pytest.fixture(scope="module")
def agent_images(docker_client: Any) -> dict[str, str]:
    for image in AGENT_IMAGES.values():
        try:
            docker_client.images.get(image)
        except Exception:
            pytest.fail(f"image {image} missing: run scripts/build-images.sh (what .ci/run does)")
    return AGENT_IMAGES


#: Codex's image under another name, as a registry would hold it: `--image codex=NAME` runs it.
RENAMED_CODEX = "contagent-e2e.example/team/codex-runner:renamed"


@pytest.fixture()
def renamed_codex(docker_client: Any, agent_images: dict[str, str]) -> Iterator[str]:
    repository, _, tag = RENAMED_CODEX.rpartition(":")
    docker_client.images.get(agent_images["codex"]).tag(repository, tag)
    yield RENAMED_CODEX
    docker_client.images.remove(RENAMED_CODEX)  # the tag only: the image keeps its own name


def test_all_agents_pass_exp_001_then_export_and_validate(
    tmp_path: Path, stub_factory: Any, run_id: str, agent_images: dict[str, str], renamed_codex: str
) -> None:
    """`contagent run --agent openhands --agent mini-swe-agent --agent codex --agent claude-code`,
    export, validate."""
    stub = stub_factory(any_agent())
    agents = [arg for agent in AGENTS for arg in ("--agent", agent)]
    proc = cli(
        "run", "--served-model-name", "stub-model", "--vllm-url", stub.url, "--experiment", "exp_001",
        *agents, "--temperature", "0.3", "--jobs", "2", "--max-iterations", "10",
        "--openhands-image", RUNNER_IMAGE, "--image", f"codex={renamed_codex}",
        "--log-dir", str(tmp_path / "logs"), "--run-id", run_id,
        "--timeout", "300",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed 4/4" in proc.stderr
    # What an agent cannot honour is said in one line at the start, never silently ignored.
    notices = [line for line in proc.stderr.splitlines() if "cannot honour" in line]
    assert len(notices) == 3, proc.stderr
    assert any("codex cannot honour --max-iterations, --temperature" in n for n in notices)
    assert any("mini-swe-agent cannot honour skills (linux-networking)" in n for n in notices)
    assert any("claude-code cannot honour --temperature: it" in n for n in notices)

    paths = RunPaths(tmp_path / "logs")
    results = [
        RolloutResult.model_validate_json(paths.rollout(f"exp_001__{a}").result.read_bytes())
        for a in AGENTS
    ]
    by_agent = {r.agent: r for r in results}
    assert set(by_agent) == set(AGENTS)
    for agent, result in by_agent.items():
        assert result.rollout_id == f"exp_001__{agent}"
        assert result.status == "passed", (agent, result.error)
        assert result.stop_condition == "finished", agent
        assert result.agent_version, agent
        assert result.iterations and result.iterations >= 2, agent
        assert result.llm is not None and result.llm.base_url.endswith(f"/r/exp_001__{agent}/v1")
        assert result.wire_params is not None and result.wire_params["model"] == "stub-model"
        assert (
            result.tokens is not None and result.tokens.exchanges == result.tokens.with_usage >= 3
        )
        expected = {"openhands": RUNNER_IMAGE, "codex": renamed_codex}.get(agent)
        assert result.image == (expected or agent_images[agent])
        on_disk = json.loads(paths.rollout(f"exp_001__{agent}").result.read_text())
        assert "openhands_version" not in on_disk and on_disk["agent_version"], agent
    assert by_agent["openhands"].skills_loaded == ["linux-networking"]
    assert by_agent["codex"].skills_loaded == ["linux-networking"]
    assert by_agent["claude-code"].skills_loaded == ["linux-networking"]
    assert by_agent["mini-swe-agent"].skills_loaded == []
    # tokens are recorded (the stand-in says it is vLLM), so Codex's Responses requests reach
    # the stand-in as chat completions through the token route
    codex_first = next(r for r in stub.requests if b'"exec_command"' in r.body)
    assert codex_first.path == "/v1/chat/completions"
    assert b"linux-networking" in codex_first.body  # Codex listed the skill to the model
    # OpenHands and mini-swe-agent were sent the sampling setting; Codex cannot be (announced).
    assert by_agent["mini-swe-agent"].wire_params["temperature"] == 0.3  # type: ignore[index]
    assert "temperature" not in by_agent["codex"].wire_params  # type: ignore[operator]
    assert "temperature" not in by_agent["claude-code"].wire_params  # type: ignore[operator]

    # Each agent's real tool printed a different fresh secret, read from the conversation.
    assert len(seen_secrets(stub.requests)) == 4
    routes = set()
    for agent in AGENTS:
        name = f"exp_001__{agent}"
        events = [orjson.loads(line) for line in paths.log(name).read_bytes().splitlines()]
        assert len(events) >= 3 and all(isinstance(e, dict) for e in events), agent
        assert "verdict: passed" in paths.result_text(name).read_text()
        routes |= {
            orjson.loads(line)["path"]
            for line in read_log_bytes(paths.rollout(name).raw_log).splitlines()
            if b'"type":"request"' in line
        }
    assert routes == {"/v1/chat/completions", "/v1/responses", "/v1/messages?beta=true"}

    out = tmp_path / "export"
    proc = cli("export", str(paths.rollouts_dir), "--out", str(out), "--filter", "all")
    assert proc.returncode == 0, proc.stderr
    rows = {row["rollout_id"]: row for row in read_rows(out / "results.jsonl")}
    for agent in AGENTS:
        row = rows[f"exp_001__{agent}"]
        assert row["training_ready"] is True, (agent, row["training_ready_reason"])
        assert row["passed"] is True and row["excluded"] == [], agent
    codex_tools = {t.get("type") for t in rows["exp_001__codex"]["tools"]}
    assert "function" in codex_tools and len(codex_tools) > 1  # Codex's non-function tools kept
    proc = cli("validate", str(out / "results.jsonl"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_contagent_build_builds_the_chosen_agent_s_image(docker_client: Any) -> None:
    """`contagent build --agent codex` builds from the agent's own Dockerfile (cached after CI's build)."""
    from tests.e2e.helpers import BASE_IMAGE

    tag = "contagent-runner-codex-buildtest:latest"
    proc = cli("build", "--agent", "codex", "--tag", tag, "--base-image", BASE_IMAGE,
               "--ca-bundle", "/etc/ssl/certs/ca-certificates.crt", timeout=900)  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"built {tag}" in proc.stderr and "for codex" in proc.stderr
        image = docker_client.images.get(tag)
        assert image.labels.get("contagent.runner-image") == "1"
        out = docker_client.containers.run(
            tag, ["sh", "-c", "codex --version; test -x /opt/venv/bin/python && echo venv"],
            remove=True, network_mode="none",
        )  # fmt: skip
        assert out.decode().split()[-2:] == ["0.171.0", "venv"]
    finally:
        docker_client.images.remove(tag, force=True)
