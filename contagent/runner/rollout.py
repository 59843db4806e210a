"""One rollout: network, proxy, services, the runner container, collection, clean-up.

The agent's only route to the LLM is the recording proxy: the rollout network is
an internal bridge (no forwarding to anywhere outside it), and the proxy listens
on that bridge's gateway address on the host, forwarding to the user's server.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from contagent.agents import DEFAULT_AGENT, Agent, AgentReport, AgentSettings, Launch, get_agent
from contagent.agents.base import AGENT_DIR, IN_CONTAINER, WORKSPACE, runs_solution
from contagent.chat import sum_usage
from contagent.compact import compact_rollout
from contagent.errors import ContagentError
from contagent.layout import RolloutPaths, RunPaths
from contagent.rawlog import read_exchanges
from contagent.rollout_result import (
    ExitCodes,
    LlmSettings,
    PhaseTimings,
    RolloutResult,
    RolloutStatus,
    TokenTotals,
)
from contagent.runner import docker_ops
from contagent.runner.config import RunConfig, rollout_name
from contagent.runner.experiment import Experiment
from contagent.runner.failfast import LLM_SERVER_STOP, server_failure
from contagent.runner.task_kind import Task

log = logging.getLogger(__name__)

AGENT_MAIN = Path(__file__).with_name("agent_main.py")

#: ``stop_condition`` of a rollout whose files could not all be written into --log-dir
LOG_DIR_STOP = "log_dir"


class LogDirError(ContagentError):
    """A rollout's files could not be written into ``--log-dir`` (a full disk, say)."""

    exit_code = 1


def _unwritable(path: Path, exc: OSError) -> LogDirError:
    return LogDirError(f"cannot write {path}: {exc.strerror or exc}")


@dataclass(frozen=True)
class RolloutPlan:
    experiment: Task
    repeat_index: int
    agent: str = DEFAULT_AGENT
    #: several agents in one run: the rollout name carries the agent
    agent_in_name: bool = False
    #: the proxy records token data (``--tokens``, resolved by the run's preflight)
    tokens: bool = False
    #: the LLM server the preflight found (``{"name", "version"}``), if it knows which
    server: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        suffix = self.agent if self.agent_in_name else None
        return rollout_name(self.experiment.name, self.repeat_index, suffix)


@dataclass
class RunContext:
    """Shared by every rollout of one ``contagent run``."""

    config: RunConfig
    paths: RunPaths
    client: docker.DockerClient
    cancel: threading.Event
    node: str | None = None  # recorded in result.json as where the rollout ran
    #: why ``cancel`` was set: the error of the rollouts it stops
    cancel_reason: str = "interrupted"

    def labels(self, rollout: str, role: str) -> dict[str, str]:
        driver = self.config.driver
        return {
            **(driver.labels() if driver is not None else {}),
            docker_ops.LABEL_RUN: self.config.run_id,
            docker_ops.LABEL_OWNER: self.config.owner,
            docker_ops.LABEL_ROLLOUT: rollout,
            docker_ops.LABEL_ROLE: role,
        }


def _settings(
    ctx: RunContext,
    plan: RolloutPlan,
    agent: Agent,
    base_url: str,
    skills: tuple[str, ...] | None = None,
    **where: str,
) -> tuple[dict[str, Any], Launch, LlmSettings]:
    """The agent's settings and launch; ``skills``: the skills the agent is given (else the
    experiment's); ``where``: AgentSettings paths other than the runner image's (a task
    image's workspace and skills folder)."""
    llm = ctx.config.llm
    effective = LlmSettings(
        model=agent.model_string(llm.served_model_name),
        base_url=base_url,
        num_retries=llm.num_retries,
        timeout_s=llm.timeout_s,
        reasoning_effort=llm.reasoning_effort,
        temperature=llm.temperature,
        top_p=llm.top_p,
        max_output_tokens=llm.max_output_tokens,
        extra_body=dict(llm.extra_body),
        max_iterations=ctx.config.max_iterations,
    )
    given = AgentSettings(
        task=plan.experiment.spec.task,
        served_model_name=llm.served_model_name,
        base_url=base_url,
        num_retries=llm.num_retries,
        timeout_s=llm.timeout_s,
        max_iterations=ctx.config.max_iterations,
        reasoning_effort=llm.reasoning_effort,
        temperature=llm.temperature,
        top_p=llm.top_p,
        max_output_tokens=llm.max_output_tokens,
        extra_body=dict(llm.extra_body),
        skills=(tuple(plan.experiment.spec.skills) if skills is None else skills)
        if "skills" in agent.honours
        else (),
        **where,
    )
    launch = agent.launch(given)
    settings = {
        "workspace": WORKSPACE,
        "setup_script": f"{IN_CONTAINER}/experiment/setup.sh",
        "evaluate_script": f"{IN_CONTAINER}/experiment/evaluate.sh",
        "out_dir": given.out_dir,
        "launch": {"argv": launch.argv, "env": launch.env},
    }
    return settings, launch, effective


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


#: request keys that carry the conversation, not settings (chat; Responses API)
_CONVERSATION_KEYS = frozenset({"messages", "tools", "input", "instructions"})


def token_totals(exchanges: Path) -> tuple[TokenTotals, dict[str, Any] | None]:
    """Usage summed over the raw log as the exporter counts it, and the first request's
    settings as sent on the wire. A log the reader refuses gives empty totals: the
    exporter reports why."""
    if not exchanges.is_file():
        return TokenTotals(exchanges=0, with_usage=0), None
    try:
        raw = read_exchanges(exchanges)
    except ContagentError:
        return TokenTotals(exchanges=0, with_usage=0), None
    usages = [u for u in (raw.usage(i) for i in sorted(raw.outcomes)) if u is not None]
    wire: dict[str, Any] | None = None
    for index in sorted(raw.requests):
        body = raw.requests[index].get("body")
        if isinstance(body, dict):
            wire = {k: v for k, v in body.items() if k not in _CONVERSATION_KEYS}
            break
    return TokenTotals(
        exchanges=len(raw.requests), with_usage=len(usages), **sum_usage(usages)
    ), wire


def _write_json_atomic(path: Path, text: str) -> None:
    """All of ``text`` at ``path`` or nothing there: a half-written result.json would be
    read as no verdict at best."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _unwritable(path, exc) from None


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise _unwritable(path, exc) from None


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


def start_rollout_proxy(ctx: RunContext, plan: RolloutPlan, name: str, net: Any) -> Any:
    """The rollout's own recording proxy on its network's gateway, answering that network
    alone and recording only rollout ``name``."""
    from contagent.proxy import start_proxy_in_thread

    cfg = ctx.config
    return start_proxy_in_thread(
        cfg.upstream_url,
        ctx.paths.rollouts_dir,
        host=net.gateway,
        port=0,
        upstream_api_key=cfg.api_key,
        upstream_ca=cfg.upstream_ca,
        upstream_timeout=cfg.llm.timeout_s + 30,
        only_rollout=name,
        allowed_clients=net.subnet,
        tokens=plan.tokens,
        server=plan.server,
    )


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
        raise _unwritable(rpaths.root, exc) from None
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
        settings, launch, effective = _settings(ctx, plan, agent, proxy.rollout_base_url(name))
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
        _write(ctx.paths.log(name), b"".join(line + b"\n" for line in report.events))
        _write(ctx.paths.err(name), stderr)
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
        _write(ctx.paths.result_text(name), _result_text(out_dir, outcome, status, error).encode())
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
    _write_json_atomic(rpaths.result, result.model_dump_json(indent=2, exclude_none=False))
    return result


def compact_finished(paths: RolloutPaths) -> None:
    """Compact an ended rollout's raw log; one that cannot be is kept plain, with a warning."""
    if not paths.exchanges.exists():
        return  # nothing recorded, or compacted already
    done = compact_rollout(paths)
    if done.status not in ("compacted", "already"):
        log.warning("rollout %s: raw log not compacted: %s", paths.rollout_id, done.note)


def _result_text(out_dir: Path, outcome: dict[str, Any], status: str, error: str | None) -> str:
    codes = outcome.get("exit_codes") or {}
    parts = []
    for phase, fname in (("setup", "setup.log"), ("evaluate", "evaluate.log")):
        path = out_dir / fname
        text = path.read_text(errors="replace") if path.is_file() else ""
        parts.append(f"== {phase}.sh (exit {codes.get(phase)}) ==\n{text}")
    parts.append(f"== verdict: {status} ==\n" + (f"{error}\n" if error else ""))
    return "\n".join(parts)
