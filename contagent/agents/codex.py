"""The Codex CLI (npm ``@openai/codex``), non-interactive ``codex exec``, Responses API.

The model provider is a custom one pointed at the rollout's proxy route with
``wire_api = "responses"``; the container is the sandbox, so Codex's own is
off. ``codex exec --json`` prints its event log (one JSON object a line) on
stdout, which becomes ``<name>.log``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from contagent.agents._util import jsonl_objects
from contagent.agents.base import AGENT_DIR, DUMMY_KEY, AgentReport, AgentSettings, Api, Launch
from contagent.agents.layer import BIN_DIR, STAGE, AgentLayer

HOME = f"{AGENT_DIR}/codex-home"
KEY_ENV = "CONTAGENT_CODEX_KEY"

_SCRIPT = """#!/bin/sh
# codex exec, headless; the task comes on stdin so that no quoting can change it.
codex --version > {out}/codex-version.txt 2>/dev/null || true
# The experiment's skills (only those it lists were copied in) as Codex skills.
mkdir -p {home}/skills
for skill in {skills}; do
  cp -r {skills_dir}/"$skill" {home}/skills/ && echo "$skill" >> {out}/codex-skills.txt
done
exec codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox \\
  -C {workspace} - < {here}/task.txt
"""


#: Codex features that reach the internet at start-up (``codex features list``)
_OFFLINE_FEATURES = ("plugins", "remote_plugin", "apps", "in_app_updates")


def _toml(value: object) -> str:
    return json.dumps(value)  # JSON strings and numbers are valid TOML values


def config_toml(s: AgentSettings) -> str:
    """``config.toml``: the proxy as the model provider, each setting chosen deliberately."""
    lines = [
        f"model = {_toml(s.served_model_name)}",
        'model_provider = "contagent"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
    ]
    if s.reasoning_effort is not None:
        lines.append(f"model_reasoning_effort = {_toml(s.reasoning_effort)}")
    lines += [
        "",
        "[model_providers.contagent]",
        'name = "contagent recording proxy"',
        f"base_url = {_toml(s.base_url)}",
        f"env_key = {_toml(KEY_ENV)}",
        'wire_api = "responses"',
        f"request_max_retries = {int(s.num_retries)}",
        f"stream_max_retries = {int(s.num_retries)}",
        f"stream_idle_timeout_ms = {int(s.timeout_s * 1000)}",
        "",
        # Start-up work that reaches the internet (a plugin catalogue fetched with git, app and
        # update checks): a rollout network has no route out, and the hung fetch cost ~3 s a rollout.
        "[features]",
        *(f"{name} = false" for name in _OFFLINE_FEATURES),
        "",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Codex:
    name: str = "codex"
    api: Api = "responses"
    image: str = "contagent-runner-codex:latest"
    dockerfile: str = "agents/codex.Dockerfile"
    honours: frozenset[str] = frozenset({"skills", "reasoning_effort"})

    def model_string(self, served_model_name: str) -> str:
        return served_model_name

    def launch(self, settings: AgentSettings) -> Launch:
        script = _SCRIPT.format(
            out=settings.out_dir,
            workspace=settings.workspace,
            here=AGENT_DIR,
            home=HOME,
            skills=" ".join(shlex.quote(s) for s in settings.skills),
            skills_dir=settings.skills_dir,
        )
        return Launch(
            argv=["sh", f"{AGENT_DIR}/codex.sh"],
            env={"CODEX_HOME": HOME, KEY_ENV: DUMMY_KEY},
            files=[
                ("codex.sh", script.encode(), 0o755),
                ("task.txt", settings.task.encode(), 0o644),
                ("codex-home/config.toml", config_toml(settings).encode(), 0o644),
            ],
        )

    def report(self, out_dir: Path) -> AgentReport:
        events = jsonl_objects(out_dir / "agent.stdout")
        report = AgentReport(events=events, skills_loaded=[])
        try:
            skills = (out_dir / "codex-skills.txt").read_text(errors="replace").split()
            report.skills_loaded = sorted(skills)
        except OSError:
            pass
        try:
            version = (out_dir / "codex-version.txt").read_text(errors="replace").split()
            report.version = version[-1] if version else None
        except OSError:
            pass
        iterations = 0
        for line in events:
            event = json.loads(line)
            kind = event.get("type")
            item = event.get("item") if isinstance(event.get("item"), dict) else {}
            if kind == "item.completed" and item.get("type") not in ("error", "reasoning"):
                iterations += 1
            elif kind == "turn.completed":
                report.stop_condition = "finished"
            elif kind in ("turn.failed", "error"):
                report.stop_condition = "error"
                err = event.get("error") if isinstance(event.get("error"), dict) else event
                report.error = str(err.get("message") or kind).splitlines()[0][:500]
        report.iterations = iterations
        return report


AGENT = Codex()

#: On a task image: the native (statically linked) codex binary of the npm package, alone.
LAYER = AgentLayer(
    collect=(
        f"mkdir -p {STAGE}{BIN_DIR} && cp \"$(find / -xdev -path '*-linux-musl/bin/codex' "
        f'-type f | head -n 1)" {STAGE}{BIN_DIR}/codex'
    ),
    smoke=f"{BIN_DIR}/codex --version",
)
