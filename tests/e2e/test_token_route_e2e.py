"""The real Claude Code and Codex through the proxy's token route, into RL token samples.

``contagent run --tokens on`` in front of the scripted stand-in (which answers chat
completions with token ids in vLLM's shapes, :mod:`contagent.testing.stub_tokens`, and
thinks before every answer): each agent speaks its own API to the proxy, the stand-in sees
nothing but chat completions asking for token ids, and the export's token samples hold the
tokens the stand-in reported, each at the position it reported it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.rawlog.stream import read_log_bytes
from contagent.testing import stub_tokens
from contagent.testing.players import any_agent, seen_secrets, thinking
from contagent.testing.stub_server_info import VLLM_DEFAULTS
from tests.e2e.helpers import MODEL
from tests.helpers import cli, cli_export_and_validate

pytestmark = pytest.mark.docker

#: each agent and the path of the API it speaks to the proxy
AGENTS = {"claude-code": "/v1/messages?beta=true", "codex": "/v1/responses"}


def _records(raw_log: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in read_log_bytes(raw_log).splitlines()]


def _echoed_reasoning(agent: str, body: dict[str, Any]) -> list[str]:
    """The thinking the agent sent back: Claude Code's signed thinking blocks' texts,
    Codex's reasoning items' texts."""
    if agent == "claude-code":
        return [
            b["thinking"]
            for m in body["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
            if b["type"] == "thinking" and b["signature"]
        ]
    return [
        part["text"]
        for item in body["input"]
        if item.get("type") == "reasoning"
        for part in item.get("content") or []
    ]


def _check_raw_log(agent: str, raw_log: Path) -> None:
    """The client's API on top, the chat exchange under ``upstream``, tokens from the latter."""
    records = _records(raw_log)
    requests = [r for r in records if r["type"] == "request"]
    outcomes = {r["index"]: r for r in records if r["type"] == "outcome"}
    assert len(requests) == 3, agent
    for n, req in enumerate(requests):
        assert req["path"] == AGENTS[agent] and req["stream"] is True
        assert req["upstream"]["path"] == "/v1/chat/completions"
        assert {"return_token_ids", "logprobs"} <= set(req["upstream_changes"])
        # the thinking of every earlier answer came back to the agent and is sent again
        assert len(_echoed_reasoning(agent, req["body"])) == n, (agent, n)
        out = outcomes[req["index"]]
        assert out["outcome"] == "completed" and out["stream_events"], agent
        prompt = out["tokens"]["prompt_token_ids"]
        assert prompt == stub_tokens.prompt_ids(req["upstream"]["body"]), agent


def _check_samples(out: Path, rows: dict[str, dict[str, Any]]) -> None:
    """Every trained token is one the stand-in sampled, with the logprob it gave at that
    position (its logprob is a function of id and position, so a shift would show)."""
    samples = pq.read_table(out / "tokens" / "data").to_pylist()
    for agent in AGENTS:
        mine = [s for s in samples if s["rollout_id"] == f"exp_001__{agent}"]
        assert len(mine) == sum(rows[f"exp_001__{agent}"]["tokens"]["samples"]) >= 1, agent
        trained = 0
        for sample in mine:
            for pos, (token, masked) in enumerate(
                zip(sample["token_ids"], sample["mask"], strict=True)
            ):
                if masked:
                    trained += 1
                    assert sample["logprobs"][pos] == pytest.approx(
                        stub_tokens.logprob(token, pos), abs=1e-6
                    ), (agent, pos)
            assert sample["token_ids"][-1] == stub_tokens.EOS and sample["mask"][-1] is True
        assert trained >= 100, agent  # three turns of reasoning, a call or an answer each


def test_claude_code_and_codex_through_the_token_route_give_token_samples(
    tmp_path: Path, stub_factory: Any, run_id: str, docker_client: Any
) -> None:
    # the render route's defaults tell the proxy the server's sampling (neither agent sends any)
    stub = stub_factory(thinking(any_agent()), render_defaults=VLLM_DEFAULTS)
    proc = cli(
        "run", "--served-model-name", MODEL, "--vllm-url", stub.url, "--experiment", "exp_001",
        "--agent", "claude-code", "--agent", "codex", "--tokens", "on", "--max-iterations", "10",
        "--log-dir", str(tmp_path / "logs"), "--run-id", run_id, "--timeout", "300",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed 2/2" in proc.stderr
    said = " ".join(proc.stderr.split())
    assert "tokens: recorded on chat, messages (via chat), responses (via chat)" in said

    # the stand-in saw chat completions only, each asking for token data
    posts = [r for r in stub.requests if r.method == "POST"]
    assert {r.path for r in posts} == {"/v1/chat/completions"} and len(posts) == 6
    assert all(r.json["return_token_ids"] is True and r.json["stream"] is True for r in posts)
    assert len(seen_secrets(stub.requests)) == 2  # each agent's real tool ran

    paths = RunPaths(tmp_path / "logs")
    for agent in AGENTS:
        folder = paths.rollout(f"exp_001__{agent}")
        result = RolloutResult.model_validate_json(folder.result.read_bytes())
        assert result.status == "passed" and result.iterations == 3, (agent, result.error)
        _check_raw_log(agent, folder.raw_log)

    out = tmp_path / "export"
    rows = cli_export_and_validate(paths.rollouts_dir, out, "tokens")
    for agent in AGENTS:
        row = rows[f"exp_001__{agent}"]
        assert row["training_ready"] is True, (agent, row["training_ready_reason"])
        assert row["tokens"]["kinds"] == [], (agent, row["tokens"]["reason"])
    _check_samples(out, rows)
