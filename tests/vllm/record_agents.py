"""Record the agent fixtures: the real Claude Code and Codex, through the recording proxy.

``python -m tests.vllm.record_agents`` runs ``contagent run --agent claude-code --agent
codex`` on ``experiments/exp_001`` (the agents' images from scripts/build-images.sh, the
Docker engine up) against the scripted stand-in model, whose players think before every
answer (:func:`contagent.testing.players.thinking`): a thinking block with a signature on
Messages, a reasoning item on Responses, each streamed as vLLM streams it. The stand-in
answers what the agents send; nothing is written by hand. From each rollout's raw log it
keeps what the client sent on its generation route (path, the recorded safe headers, the
body exactly as received) and writes ``tests/vllm/fixtures/<agent>.json``.

``--route chat`` records through the proxy's token route instead (the stand-in answers
chat completions with token ids; the proxy serves Messages and Responses from them).

Nothing is normalised here; :mod:`tests.vllm.agent_fixtures` says what the replay changes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from contagent.agents import AGENTS
from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.rawlog.stream import read_log_bytes
from contagent.testing.llm_stub import start_stub_in_thread
from contagent.testing.players import any_agent, thinking

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: the agents recorded, and the route each speaks
ROUTES = {"claude-code": "/v1/messages", "codex": "/v1/responses"}
MODEL = "stub-model"


def generation_requests(raw_log: Path, route: str) -> list[dict[str, Any]]:
    """What the client sent on ``route``, in arrival order, as the raw log holds it."""
    out = []
    for line in read_log_bytes(raw_log).splitlines():
        record = orjson.loads(line)
        if record.get("type") != "request" or record.get("method") != "POST":
            continue
        if record["path"].split("?")[0].endswith(route):
            out.append({k: record[k] for k in ("path", "headers", "stream", "body")})
    return out


def record(log_dir: Path, route_mode: str) -> dict[str, dict[str, Any]]:
    """Run both agents and return each one's fixture (raises on a failed rollout)."""
    stub = start_stub_in_thread(thinking(any_agent()), models=[MODEL])
    try:
        args = ["--messages-route", "chat", "--responses-route", "chat", "--tokens", "on"]
        proc = subprocess.run(
            [sys.executable, "-m", "contagent", "run", "--served-model-name", MODEL,
             "--vllm-url", stub.url, "--experiment", "exp_001",
             "--agent", "claude-code", "--agent", "codex", "--max-iterations", "10",
             "--log-dir", str(log_dir), "--timeout", "300",
             *(args if route_mode == "chat" else [])],
            capture_output=True, text=True, cwd=REPO, timeout=900,
        )  # fmt: skip
    finally:
        stub.stop()
    if proc.returncode != 0:
        raise SystemExit(f"contagent run failed ({proc.returncode}): {proc.stderr[-3000:]}")
    paths = RunPaths(log_dir)
    fixtures = {}
    for agent, route in ROUTES.items():
        folder = paths.rollout(f"exp_001__{agent}")
        result = RolloutResult.model_validate_json(folder.result.read_bytes())
        if result.status != "passed":
            raise SystemExit(f"{agent} did not pass: {result.status} {result.error}")
        fixtures[agent] = {
            "agent": agent,
            "agent_version": result.agent_version,
            "image": AGENTS[agent].image,
            "recorded_by": f"python -m tests.vllm.record_agents --route {route_mode}",
            "task": "experiments/exp_001 against the stand-in's thinking players",
            "requests": generation_requests(folder.raw_log, route),
        }
    return fixtures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="record_agents", description=__doc__)
    parser.add_argument("--route", choices=("native", "chat"), default="native")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="contagent-record-") as tmp:
        fixtures = record(Path(tmp) / "logs", args.route)
    args.out.mkdir(parents=True, exist_ok=True)
    for agent, fixture in fixtures.items():
        path = args.out / f"{agent.replace('-', '_')}.json"
        path.write_bytes(orjson.dumps(fixture, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.write(f"wrote {path} ({len(fixture['requests'])} requests)\n")


if __name__ == "__main__":
    main()
