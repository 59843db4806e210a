"""Claude Code (npm ``@anthropic-ai/claude-code``), headless ``claude -p``, Messages API.

The native binary runs unattended and offline: ``-p`` with the task on stdin,
``--output-format stream-json --verbose`` (its events, one JSON object a line,
on stdout, which becomes ``<name>.log``), ``--dangerously-skip-permissions``
(the container is the sandbox; as root it needs ``IS_SANDBOX=1``). Its only
connection is the model: ``ANTHROPIC_BASE_URL`` is the rollout's proxy route
without ``/v1`` (the client adds the Messages route whole), every model alias names the
served model, and ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` stops its
start-up calls (a ``HEAD /api/hello`` and look-ups of the vendor's API host).
Skills are copied to ``~/.claude/skills/<name>/``, where Claude Code loads them;
the iteration limit is ``--max-turns``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contagent.agents._util import jsonl_objects
from contagent.agents.base import AGENT_DIR, DUMMY_KEY, AgentReport, AgentSettings, Api, Launch
from contagent.agents.layer import BIN_DIR, STAGE, AgentLayer, refuse
from contagent.wire import server_root

#: its own temporary files and sockets (default /tmp/claude-<uid>, /tmp/cc-socks), kept apart
TMPDIR = f"{AGENT_DIR}/claude-tmp"

_SCRIPT = """#!/bin/sh
# claude -p, headless; the task comes on stdin so that no quoting can change it.
claude --version > {out}/claude-version.txt 2>/dev/null || true
mkdir -p {tmpdir} && chmod 0700 {tmpdir}
# The experiment's skills (only those it lists were copied in), where Claude Code loads them.
mkdir -p "$HOME/.claude/skills"
for skill in {skills}; do
  cp -r {skills_dir}/"$skill" "$HOME/.claude/skills/" && echo "$skill" >> {out}/claude-skills.txt
done
claude -p --output-format stream-json --verbose --dangerously-skip-permissions \\
  --max-turns {max_turns} < {here}/task.txt
rc=$?
# Stopping at --max-turns (claude exits 1) is the iteration limit, not an agent failure.
if [ "$rc" -ne 0 ] && tail -n 1 {out}/agent.stdout | grep -q '"subtype":"error_max_turns"'; then
  exit 0
fi
exit "$rc"
"""

#: ``result`` event subtypes, in the runner's stop_condition words
STOPS = {"success": "finished", "error_max_turns": "max_iterations"}


def environment(s: AgentSettings) -> dict[str, str]:
    """The variables that point it at the proxy and keep it from anything else."""
    model = s.served_model_name
    env = {
        "IS_SANDBOX": "1",
        "ANTHROPIC_BASE_URL": server_root(s.base_url),
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_SUBAGENT_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_TMPDIR": TMPDIR,
        "API_TIMEOUT_MS": str(int(s.timeout_s * 1000)),
    }
    if s.max_output_tokens is not None:
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(s.max_output_tokens)
    return env


def _event(line: bytes) -> dict[str, Any]:
    value = json.loads(line)
    return value if isinstance(value, dict) else {}


def _read_result(event: dict[str, Any], report: AgentReport) -> None:
    """The final ``result`` event: how the run ended, and why when it failed."""
    subtype = str(event.get("subtype") or "")
    stop = STOPS.get(subtype, "error")
    report.stop_condition = "error" if event.get("is_error") and stop == "finished" else stop
    if report.stop_condition == "error":
        said = str(event.get("result") or subtype or "error")
        report.error = (said.splitlines() or [subtype])[0][:500]


@dataclass(frozen=True)
class ClaudeCode:
    name: str = "claude-code"
    api: Api = "messages"
    image: str = "contagent-runner-claude-code:latest"
    dockerfile: str = "agents/claude-code.Dockerfile"
    honours: frozenset[str] = frozenset({"skills", "max_iterations", "max_output_tokens"})

    def model_string(self, served_model_name: str) -> str:
        return served_model_name

    def launch(self, settings: AgentSettings) -> Launch:
        script = _SCRIPT.format(
            out=settings.out_dir,
            here=AGENT_DIR,
            tmpdir=TMPDIR,
            skills=" ".join(shlex.quote(s) for s in settings.skills),
            skills_dir=settings.skills_dir,
            max_turns=int(settings.max_iterations),
        )
        return Launch(
            argv=["sh", f"{AGENT_DIR}/claude-code.sh"],
            env=environment(settings),
            files=[
                ("claude-code.sh", script.encode(), 0o755),
                ("task.txt", settings.task.encode(), 0o644),
            ],
        )

    def report(self, out_dir: Path) -> AgentReport:
        events = jsonl_objects(out_dir / "agent.stdout")
        skills: list[str] = []
        try:
            skills = sorted((out_dir / "claude-skills.txt").read_text(errors="replace").split())
        except OSError:
            pass
        report = AgentReport(events=events, skills_loaded=skills)
        try:
            version = (out_dir / "claude-version.txt").read_text(errors="replace").split()
            report.version = version[0] if version else None
        except OSError:
            pass
        turns = 0
        for line in events:
            event = _event(line)
            kind = event.get("type")
            if kind == "system" and event.get("subtype") == "init" and report.version is None:
                said = event.get("claude_code_version")
                report.version = str(said) if said else None
            elif kind == "assistant":
                turns += 1
            elif kind == "result":
                _read_result(event, report)
                if isinstance(event.get("num_turns"), int):
                    turns = event["num_turns"]
        report.iterations = turns
        return report


AGENT = ClaudeCode()

#: On a task image: the Claude Code binary of the runner image, which needs a glibc base.
LAYER = AgentLayer(
    collect=f"mkdir -p {STAGE}{BIN_DIR} && cp /usr/local/bin/claude {STAGE}{BIN_DIR}/claude",
    smoke=f"{BIN_DIR}/claude --version >/dev/null 2>&1 || "
    + refuse("the Claude Code binary does not start on the task image (it needs glibc)"),
)
