"""One rollout of a seed experiment: its services and the runner container (the phases),
and its verdict from what the container left (the outcome); the shared lifecycle
(:mod:`contagent.runner.lifecycle.rollout_lifecycle`) does the rest.

The runner image runs the generic in-container driver (``agent_main.py``): setup.sh,
the agent, evaluate.sh; the host waits for the container and reads what it left.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import docker.errors

from contagent.agents import Agent, Launch
from contagent.agents.base import AGENT_DIR, IN_CONTAINER, WORKSPACE
from contagent.rawlog.result import ExitCodes, LlmSettings, RolloutStatus
from contagent.runner import docker_ops
from contagent.runner.lifecycle import agent_main
from contagent.runner.lifecycle.rollout import RolloutPlan, RunContext, agent_settings, write_file
from contagent.runner.lifecycle.rollout_lifecycle import PhaseFacts
from contagent.runner.tasks.experiment import Experiment

AGENT_MAIN = Path(agent_main.__file__)


def _runner_archive(exp: Experiment, settings: dict[str, Any], launch: Launch) -> bytes:
    root = IN_CONTAINER.lstrip("/")  # the archive is unpacked at /
    agent_dir = AGENT_DIR.lstrip("/")
    entries: list[tuple[str, Path | bytes, int]] = [
        (f"{root}/agent_main.py", AGENT_MAIN.read_bytes(), 0o644),
        (f"{root}/settings.json", json.dumps(settings, indent=2).encode(), 0o644),
        (f"{root}/experiment/setup.sh", exp.setup_script, 0o755),
        (f"{root}/experiment/evaluate.sh", exp.evaluate_script, 0o755),
    ]
    entries += [(f"{agent_dir}/{p}", data, mode) for p, data, mode in launch.files]
    if exp.workspace.is_dir():
        entries.append(("root/workspace", exp.workspace, 0))
    for skill_dir in exp.skill_dirs:
        entries.append((f"contagent/skills/{skill_dir.name}", skill_dir, 0))
    return docker_ops.make_tar(entries)


def _verdict(
    outcome: dict[str, Any], timed_out: bool, cancelled: str | None, container_code: int | None
) -> tuple[RolloutStatus, str | None]:
    codes = outcome.get("exit_codes") or {}
    if cancelled is not None:
        return "infra_error", cancelled
    if timed_out:
        return "timeout", "the rollout ran past --timeout and was stopped"
    if codes.get("setup") is None:
        return (
            "infra_error",
            f"the runner container exited ({container_code}) before setup.sh finished",
        )
    if codes["setup"] != 0:
        return "infra_error", f"setup.sh exited {codes['setup']}"
    if codes.get("agent") not in (0, None):
        return "agent_error", outcome.get("agent_error") or f"the agent exited {codes['agent']}"
    if codes.get("evaluate") is None:
        return (
            "infra_error",
            f"the runner container exited ({container_code}) before evaluate.sh finished",
        )
    return ("passed", None) if codes["evaluate"] == 0 else ("failed", None)


class SeedPhases:
    """A seed experiment's rollout: its services, then the runner container to its end."""

    def __init__(self, ctx: RunContext, plan: RolloutPlan, agent: Agent) -> None:
        assert isinstance(plan.experiment, Experiment)
        self.ctx, self.plan, self.agent, self.exp = ctx, plan, agent, plan.experiment
        self.image: str | None = ctx.config.image_for(agent.name)
        self.llm: LlmSettings | None = None
        self.outcome: dict[str, Any] = {}
        self.stderr = b""
        self.container_code: int | None = None
        self.container_s: float | None = None
        self.timed_out = False

    def run(self, prefix: str, net: Any, proxy: Any, collected: Path) -> None:
        ctx, name, exp = self.ctx, self.plan.name, self.exp
        settings, launch, self.llm = agent_settings(
            ctx, self.plan, self.agent, proxy.rollout_base_url(name)
        )
        for svc in exp.spec.services:
            docker_ops.start_service(
                ctx.client,
                name=f"{prefix}-{svc.name}",
                alias=svc.name,
                image=svc.image,
                network=net.name,
                environment=svc.environment,
                entrypoint=exp.entrypoint_path(svc),
                labels=ctx.labels(name, "service"),
            )
        container = ctx.client.containers.create(
            self.image,
            name=f"{prefix}-runner",
            hostname="runner",
            network=net.name,
            cap_add=list(exp.spec.cap_add) or None,
            labels=ctx.labels(name, "runner"),
            environment={"HOME": "/root", "CONTAGENT_ROLLOUT": name},
            working_dir=WORKSPACE,
            init=True,
        )
        container.put_archive("/", _runner_archive(exp, settings, launch))
        container.start()
        deadline = time.monotonic() + ctx.config.timeout_s
        self.container_code, self.timed_out = docker_ops.wait_container(
            container, deadline, ctx.cancel.is_set
        )
        self.container_s = docker_ops.run_seconds(container)
        self._collect(container, collected)

    def _collect(self, container: Any, collected: Path) -> None:
        try:
            bits, _ = container.get_archive(f"{IN_CONTAINER}/out")
            docker_ops.extract_tar(bits, collected)
        except docker.errors.NotFound:
            pass
        self.stderr = container.logs(stdout=False, stderr=True) or b""
        if (collected / "out" / "outcome.json").is_file():
            self.outcome = json.loads((collected / "out" / "outcome.json").read_text())

    def verdict(self) -> tuple[RolloutStatus, str | None]:
        return _verdict(self.outcome, self.timed_out, None, self.container_code)

    def write_files(self, collected: Path, status: RolloutStatus, error: str | None) -> None:
        paths, name = self.ctx.paths, self.plan.name
        write_file(paths.err(name), self.stderr)
        text = _result_text(collected / "out", self.outcome, status, error)
        write_file(paths.result_text(name), text.encode())

    def facts(self, status: RolloutStatus) -> PhaseFacts:
        codes = self.outcome.get("exit_codes") or {}
        evaluated = codes.get("evaluate") is not None and status in (
            "passed", "failed", "agent_error",
        )  # fmt: skip
        return PhaseFacts(
            exit_codes=ExitCodes(
                setup=codes.get("setup"),
                agent=codes.get("agent"),
                evaluate=codes.get("evaluate"),
                container=self.container_code,
            ),
            timings=self.outcome.get("timings") or {},
            container_s=self.container_s,
            reward=(1.0 if status == "passed" else 0.0) if evaluated else None,
        )


def _result_text(out_dir: Path, outcome: dict[str, Any], status: str, error: str | None) -> str:
    codes = outcome.get("exit_codes") or {}
    parts = []
    for phase, fname in (("setup", "setup.log"), ("evaluate", "evaluate.log")):
        path = out_dir / fname
        text = path.read_text(errors="replace") if path.is_file() else ""
        parts.append(f"== {phase}.sh (exit {codes.get(phase)}) ==\n{text}")
    parts.append(f"== verdict: {status} ==\n" + (f"{error}\n" if error else ""))
    return "\n".join(parts)
