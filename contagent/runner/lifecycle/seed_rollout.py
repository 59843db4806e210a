"""One rollout of a seed experiment: network, proxy, services, the runner container,
collection, clean-up.

The runner image runs the generic in-container driver (``agent_main.py``): setup.sh,
the agent, evaluate.sh; the host waits for the container and reads what it left.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from contagent.agents import AgentReport, Launch, get_agent
from contagent.agents.base import AGENT_DIR, IN_CONTAINER, WORKSPACE, runs_solution
from contagent.errors import ContagentError
from contagent.rawlog.result import (
    ExitCodes,
    LlmSettings,
    PhaseTimings,
    RolloutResult,
    RolloutStatus,
)
from contagent.runner import docker_ops
from contagent.runner.lifecycle.rollout import (
    LOG_DIR_STOP,
    RolloutPlan,
    RunContext,
    agent_settings,
    start_rollout_proxy,
    token_totals,
    unwritable,
    write_file,
    write_json_atomic,
)
from contagent.runner.stopping.failfast import LLM_SERVER_STOP, server_failure
from contagent.runner.tasks.experiment import Experiment

log = logging.getLogger(__name__)

AGENT_MAIN = Path(__file__).with_name("agent_main.py")


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


def run_rollout(ctx: RunContext, plan: RolloutPlan) -> RolloutResult:
    """Run one rollout of a seed experiment to the end and write its files; never raises
    for docker trouble.

    Raises :class:`LogDirError` when its files cannot be written: then no result.json
    claims a verdict."""
    exp = plan.experiment
    assert isinstance(exp, Experiment)

    cfg = ctx.config
    name = plan.name
    agent = get_agent(plan.agent)
    image = cfg.image_for(agent.name)
    rpaths = ctx.paths.rollout(name)
    try:
        rpaths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unwritable(rpaths.root, exc) from None
    t0 = time.monotonic()
    started = time.time()
    prefix = f"contagent-{cfg.run_id}-{name}"
    outcome: dict[str, Any] = {}
    stderr = b""
    container_code: int | None = None
    container_s: float | None = None
    timed_out = False
    error: str | None = None
    effective: LlmSettings | None = None
    proxy: Any = None
    stop_here: str | None = None  # a stop condition that ends the whole run
    collected = Path(tempfile.mkdtemp(prefix="contagent-out-"))
    try:
        net = docker_ops.create_network(ctx.client, prefix, ctx.labels(name, "network"))
        proxy = start_rollout_proxy(ctx, plan, name, net)
        settings, launch, effective = agent_settings(ctx, plan, agent, proxy.rollout_base_url(name))
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
            image,
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
        deadline = time.monotonic() + cfg.timeout_s
        container_code, timed_out = docker_ops.wait_container(
            container, deadline, ctx.cancel.is_set
        )
        container_s = docker_ops.run_seconds(container)
        try:
            bits, _ = container.get_archive(f"{IN_CONTAINER}/out")
            docker_ops.extract_tar(bits, collected)
        except docker.errors.NotFound:
            pass
        stderr = container.logs(stdout=False, stderr=True) or b""
        out_dir = collected / "out"
        if (out_dir / "outcome.json").is_file():
            outcome = json.loads((out_dir / "outcome.json").read_text())
    except (
        docker.errors.DockerException,
        requests.exceptions.RequestException,
        OSError,
        ContagentError,
    ) as exc:
        # One rollout's trouble (an image that is not there, a proxy that cannot listen) is
        # recorded as its infra_error; the other rollouts still run. An engine that stopped
        # answering ends the run.
        gone = docker_ops.engine_gone(exc)
        error = gone or f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        stop_here = docker_ops.ENGINE_STOP if gone else None
        log.warning("rollout %s: %s", name, error)
    finally:
        if proxy is not None:
            proxy.stop()
        if stop_here is None:  # an engine that is gone would only refuse again
            try:
                docker_ops.remove_labelled(
                    ctx.client, {docker_ops.LABEL_RUN: cfg.run_id, docker_ops.LABEL_ROLLOUT: name}
                )
            except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
                log.warning("rollout %s: clean-up failed: %s", name, exc)
    unrecorded = proxy.proxy.record_errors if proxy is not None else []
    if unrecorded and error is None:
        # the raw log misses part of what happened: no verdict may be claimed from it
        error, stop_here = f"the raw exchange log is incomplete: {unrecorded[0]}", LOG_DIR_STOP

    try:
        out_dir = collected / "out"
        report = agent.report(out_dir) if out_dir.is_dir() else AgentReport()
        if report.error:
            outcome["agent_error"] = report.error
        write_file(ctx.paths.log(name), b"".join(line + b"\n" for line in report.events))
        write_file(ctx.paths.err(name), stderr)
        if error is not None:
            status: RolloutStatus = "infra_error"
        else:
            cancelled = ctx.cancel_reason if ctx.cancel.is_set() else None
            status, error = _verdict(outcome, timed_out, cancelled, container_code)
        stop_condition = "timeout" if status == "timeout" else (stop_here or report.stop_condition)
        if status == "agent_error":
            # the agent raised because the LLM server failed it: not the model's doing
            failure = server_failure(rpaths.raw_log)
            if failure is not None:
                status, error, stop_condition = "infra_error", failure, LLM_SERVER_STOP
        write_file(
            ctx.paths.result_text(name), _result_text(out_dir, outcome, status, error).encode()
        )
    finally:
        shutil.rmtree(collected, ignore_errors=True)

    tokens, wire = token_totals(rpaths.raw_log)
    codes = outcome.get("exit_codes") or {}
    phases = outcome.get("timings") or {}
    wall = time.monotonic() - t0
    inside = sum(float(phases.get(k) or 0.0) for k in ("setup_s", "agent_s", "evaluate_s"))
    evaluated = codes.get("evaluate") is not None and status in ("passed", "failed", "agent_error")
    result = RolloutResult(
        rollout_id=name,
        experiment=plan.experiment.name,
        model=cfg.llm.served_model_name,
        status=status,
        passed=status == "passed",
        reward=(1.0 if status == "passed" else 0.0) if evaluated else None,
        stop_condition=stop_condition,
        started=started,
        ended=time.time(),
        duration_s=wall,
        run_id=cfg.run_id,
        repeat_index=plan.repeat_index,
        image=image,
        node=ctx.node,
        agent=agent.name,
        agent_version=report.version,
        server=plan.server,
        exit_codes=ExitCodes(
            setup=codes.get("setup"),
            agent=codes.get("agent"),
            evaluate=codes.get("evaluate"),
            container=container_code,
        ),
        timings=PhaseTimings(
            setup_s=phases.get("setup_s"),
            agent_s=phases.get("agent_s"),
            evaluate_s=phases.get("evaluate_s"),
            container_s=container_s,
            wall_s=wall,
            overhead_s=wall - inside if phases else None,
        ),
        iterations=report.iterations,
        tokens=tokens,
        llm=effective,
        wire_params=wire,
        skills_loaded=report.skills_loaded,
        reference_solution=runs_solution(agent),
        error=error,
    )
    write_json_atomic(rpaths.result, result.model_dump_json(indent=2, exclude_none=False))
    return result


def _result_text(out_dir: Path, outcome: dict[str, Any], status: str, error: str | None) -> str:
    codes = outcome.get("exit_codes") or {}
    parts = []
    for phase, fname in (("setup", "setup.log"), ("evaluate", "evaluate.log")):
        path = out_dir / fname
        text = path.read_text(errors="replace") if path.is_file() else ""
        parts.append(f"== {phase}.sh (exit {codes.get(phase)}) ==\n{text}")
    parts.append(f"== verdict: {status} ==\n" + (f"{error}\n" if error else ""))
    return "\n".join(parts)
