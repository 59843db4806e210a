"""One rollout of a Harbor task: its phases (``harbor_phases``), then its verdict and files.

The reward is read from ``/logs/verifier/reward.json`` (named numbers, ``reward``
the main one), else ``reward.txt``; ``passed`` is reward == 1.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from contagent.agents import AgentReport, get_agent
from contagent.agents.base import runs_solution
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
    token_totals,
    unwritable,
    write_file,
    write_json_atomic,
)
from contagent.runner.stopping.failfast import LLM_SERVER_STOP, server_failure
from contagent.runner.tasks.harbor_phases import Outcome, run_phases
from contagent.runner.tasks.harbor_task import HarborTask

log = logging.getLogger(__name__)


def _verdict(
    out: Outcome, error: str | None, cancelled: str | None
) -> tuple[RolloutStatus, str | None]:
    if error is not None:
        return "infra_error", error
    if cancelled is not None:
        return "infra_error", cancelled
    if out.setup_error is not None:
        return "infra_error", out.setup_error
    if out.verifier_timed_out:
        return "timeout", f"the verifier ran past {out.verifier_limit} and was stopped"
    if out.reward_error is not None:
        return "infra_error", out.reward_error
    if out.agent_timed_out:
        return "timeout", f"the agent ran past {out.agent_limit} and was stopped"
    if out.codes.get("agent") not in (0, None):
        return "agent_error", f"the agent exited {out.codes['agent']}"
    return ("passed", None) if out.reward == 1 else ("failed", None)


def run_harbor_rollout(ctx: RunContext, plan: RolloutPlan) -> RolloutResult:
    """Run one rollout of a Harbor task and write its files; never raises for Docker trouble."""
    task = plan.experiment
    assert isinstance(task, HarborTask)
    cfg, name = ctx.config, plan.name
    agent = get_agent(plan.agent)
    rpaths = ctx.paths.rollout(name)
    try:
        rpaths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unwritable(rpaths.root, exc) from None
    t0, started = time.monotonic(), time.time()
    out = Outcome()
    error: str | None = None
    stop_here: str | None = None
    image: str | None = None
    effective: LlmSettings | None = None
    collected = Path(tempfile.mkdtemp(prefix="contagent-out-"))
    try:
        image, effective = run_phases(ctx, plan, task, agent, out, collected)
    except (
        docker.errors.DockerException,
        requests.exceptions.RequestException,
        OSError,
        ContagentError,
    ) as exc:
        gone = docker_ops.engine_gone(exc)
        text = str(exc) if isinstance(exc, ContagentError) else f"{type(exc).__name__}: {exc}"
        error = (gone or text).splitlines()[0][:500]
        stop_here = docker_ops.ENGINE_STOP if gone else None
        log.warning("rollout %s: %s", name, error)
    finally:
        if stop_here is None:  # an engine that is gone would only refuse again
            try:
                docker_ops.remove_labelled(
                    ctx.client, {docker_ops.LABEL_RUN: cfg.run_id, docker_ops.LABEL_ROLLOUT: name}
                )
            except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
                log.warning("rollout %s: clean-up failed: %s", name, exc)
    if out.unrecorded and error is None:
        # the raw log misses part of what happened: no verdict may be claimed from it
        error, stop_here = f"the raw exchange log is incomplete: {out.unrecorded[0]}", LOG_DIR_STOP
    try:
        out_dir = collected / "out"
        report = agent.report(out_dir) if out_dir.is_dir() else AgentReport()
        write_file(ctx.paths.log(name), b"".join(line + b"\n" for line in report.events))
        write_file(ctx.paths.err(name), _read(out_dir / "agent.stderr").encode())
        cancelled = ctx.cancel_reason if ctx.cancel.is_set() else None
        status, error = _verdict(out, error, cancelled)
        stop_condition = "timeout" if status == "timeout" else (stop_here or report.stop_condition)
        if status == "agent_error":
            error = report.error or error
            # the agent failed because the LLM server failed it: not the model's doing
            failure = server_failure(rpaths.exchanges)
            if failure is not None:
                status, error, stop_condition = "infra_error", failure, LLM_SERVER_STOP
        verifier_log = _read(collected / "verifier" / "test-stdout.txt")
        text = f"== tests/test.sh (exit {out.codes.get('evaluate')}) ==\n{verifier_log}\n"
        text += f"== verdict: {status} ==\n" + (f"{error}\n" if error else "")
        write_file(ctx.paths.result_text(name), text.encode())
        # the proxy writes the raw log at its first request; with none (the oracle) the log
        # is empty, so that the export and the validator still see and account for it
        if not rpaths.exchanges.exists():
            write_file(rpaths.exchanges, b"")
    finally:
        shutil.rmtree(collected, ignore_errors=True)
    tokens, wire = token_totals(rpaths.exchanges)
    wall = time.monotonic() - t0
    inside = sum(out.timings.values())
    evaluated = out.reward is not None and status != "infra_error"
    result = RolloutResult(
        rollout_id=name,
        experiment=task.name,
        model=cfg.llm.served_model_name if agent.api != "none" else None,
        status=status,
        passed=status == "passed",
        reward=out.reward if evaluated else None,
        rewards=out.rewards if evaluated else None,
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
            setup=out.codes.get("setup"),
            agent=out.codes.get("agent"),
            evaluate=out.codes.get("evaluate"),
        ),
        timings=PhaseTimings(
            setup_s=out.timings.get("setup_s"),
            agent_s=out.timings.get("agent_s"),
            evaluate_s=out.timings.get("evaluate_s"),
            wall_s=wall,
            overhead_s=wall - inside if out.timings else None,
        ),
        iterations=report.iterations,
        tokens=tokens,
        llm=effective if agent.api != "none" else None,
        wire_params=wire,
        skills_loaded=report.skills_loaded,
        reference_solution=runs_solution(agent),
        error=error,
    )
    write_json_atomic(rpaths.result, result.model_dump_json(indent=2, exclude_none=False))
    return result


def _read(path: Path, limit: int = 1024 * 1024) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
