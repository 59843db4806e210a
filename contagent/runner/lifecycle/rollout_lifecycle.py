"""One rollout, whatever its task kind: the lifecycle every kind shares.

The lifecycle makes the rollout's network and recording proxy, runs the kind's container
phases (:class:`RolloutPhases`), and owns everything after: Docker's errors (the rollout's
``infra_error``; an engine that is gone ends the run), the clean-up of what the rollout
labelled, the check that the raw log is whole, the agent's report, the verdict, an LLM
server that failed the agent, and ``result.json``, which :func:`rollout_result` alone makes.
A task kind supplies only its phases and its outcome.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import docker.errors
import requests.exceptions

from contagent.agents import Agent, AgentReport, get_agent
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
from contagent.runner.config import RunConfig
from contagent.runner.lifecycle.rollout import (
    LOG_DIR_STOP,
    RolloutPlan,
    RunContext,
    start_rollout_proxy,
    token_totals,
    unwritable,
    write_file,
    write_json_atomic,
)
from contagent.runner.stopping.failfast import LLM_SERVER_STOP, server_failure

log = logging.getLogger(__name__)

#: What one rollout's phases may raise that is the rollout's trouble, not the run's.
DOCKER_TROUBLE = (
    docker.errors.DockerException,
    requests.exceptions.RequestException,
    OSError,
    ContagentError,
)


@dataclass
class PhaseFacts:
    """What a kind's phases measured, as ``result.json`` records it."""

    exit_codes: ExitCodes = field(default_factory=ExitCodes)
    #: seconds of each phase that reported them (``setup_s``, ``agent_s``, ``evaluate_s``);
    #: empty when none did
    timings: dict[str, float | None] = field(default_factory=dict)
    container_s: float | None = None
    reward: float | None = None
    rewards: dict[str, float] | None = None


class RolloutPhases(Protocol):
    """What a task kind supplies for one rollout: its container phases and its outcome.

    Made by the kind's factory as ``phases(ctx, plan, agent)``; the lifecycle then calls
    :meth:`run` once and, whatever it raised, :meth:`verdict` (unless the rollout already
    failed or was cancelled), :meth:`write_files` and :meth:`facts`.
    """

    @property
    def image(self) -> str | None:
        """The image the rollout ran in, once known."""
        ...

    @property
    def llm(self) -> LlmSettings | None:
        """The agent's effective LLM settings, once it was given them."""
        ...

    def run(self, prefix: str, net: Any, proxy: Any, collected: Path) -> None:
        """The kind's containers, named from ``prefix``, on the rollout's network ``net``,
        the agent pointed at ``proxy``; what they leave is copied into ``collected``
        (its ``out/`` is the agent's out folder). Raises what :data:`DOCKER_TROUBLE` names."""
        ...

    def verdict(self) -> tuple[RolloutStatus, str | None]:
        """The status and error the phases' outcome gives (they ran without an error and
        the run was not cancelled)."""
        ...

    def write_files(self, collected: Path, status: RolloutStatus, error: str | None) -> None:
        """The rollout's stderr and verdict text, and whatever else the kind keeps."""
        ...

    def facts(self, status: RolloutStatus) -> PhaseFacts:
        """Exit codes, timings and rewards for ``result.json``, the verdict being ``status``."""
        ...


PhasesFactory = Callable[[RunContext, RolloutPlan, Agent], RolloutPhases]


def rollout_result(
    plan: RolloutPlan,
    config: RunConfig,
    status: RolloutStatus,
    error: str | None,
    started: float,
    **facts: Any,
) -> RolloutResult:
    """The one place a :class:`RolloutResult` is made: the plan's and the run's fields, the
    verdict, and ``facts`` (any other field of the model)."""
    return RolloutResult(
        rollout_id=plan.name,
        experiment=plan.experiment.name,
        server=plan.server,
        run_id=config.run_id,
        repeat_index=plan.repeat_index,
        status=status,
        passed=status == "passed",
        started=started,
        ended=time.time(),
        error=error,
        **facts,
    )


@dataclass
class _Run:
    """What the lifecycle learns of one rollout as it goes."""

    error: str | None = None
    #: a stop condition that ends the whole run
    stop_here: str | None = None


def run_rollout(ctx: RunContext, plan: RolloutPlan, make: PhasesFactory) -> RolloutResult:
    """Run one rollout to the end with the phases ``make`` gives and write its files; never
    raises for Docker trouble (that is the rollout's ``infra_error``).

    Raises :class:`~contagent.runner.lifecycle.rollout.LogDirError` when its files cannot
    be written: then no result.json claims a verdict."""
    agent = get_agent(plan.agent)
    rpaths = ctx.paths.rollout(plan.name)
    try:
        rpaths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unwritable(rpaths.root, exc) from None
    t0, started = time.monotonic(), time.time()
    phases = make(ctx, plan, agent)
    collected = Path(tempfile.mkdtemp(prefix="contagent-out-"))
    try:
        run = _run_phases(ctx, plan, phases, collected)
        report = agent.report(collected / "out") if (collected / "out").is_dir() else AgentReport()
        write_file(ctx.paths.log(plan.name), b"".join(line + b"\n" for line in report.events))
        status, error, stop_condition = _judge(ctx, plan, phases, run, report)
        phases.write_files(collected, status, error)
    finally:
        shutil.rmtree(collected, ignore_errors=True)
    tokens, wire = token_totals(rpaths.raw_log)
    facts, wall = phases.facts(status), time.monotonic() - t0
    phase_s = {k: facts.timings.get(k) for k in ("setup_s", "agent_s", "evaluate_s")}
    inside = sum(float(v or 0.0) for v in phase_s.values())
    speaks = agent.api != "none"
    result = rollout_result(
        plan, ctx.config, status, error, started,
        model=ctx.config.llm.served_model_name if speaks else None,
        reward=facts.reward, rewards=facts.rewards, stop_condition=stop_condition,
        duration_s=wall, image=phases.image, node=ctx.node, agent=agent.name,
        agent_version=report.version, exit_codes=facts.exit_codes,
        timings=PhaseTimings(
            **phase_s, container_s=facts.container_s, wall_s=wall,
            overhead_s=wall - inside if facts.timings else None,
        ),
        iterations=report.iterations, tokens=tokens, llm=phases.llm if speaks else None,
        wire_params=wire, skills_loaded=report.skills_loaded,
        reference_solution=runs_solution(agent),
    )  # fmt: skip
    write_json_atomic(rpaths.result, result.model_dump_json(indent=2, exclude_none=False))
    return result


def _run_phases(ctx: RunContext, plan: RolloutPlan, phases: RolloutPhases, collected: Path) -> _Run:
    """The network, the proxy and the kind's phases; then the clean-up, whatever happened,
    and the check that the proxy recorded every exchange."""
    name, run, proxy = plan.name, _Run(), None
    prefix = f"contagent-{ctx.config.run_id}-{name}"
    try:
        net = docker_ops.create_network(ctx.client, prefix, ctx.labels(name, "network"))
        proxy = start_rollout_proxy(ctx, plan, name, net)
        phases.run(prefix, net, proxy, collected)
    except DOCKER_TROUBLE as exc:
        # One rollout's trouble (an image that is not there, a proxy that cannot listen) is
        # recorded as its infra_error; the other rollouts still run. An engine that stopped
        # answering ends the run.
        gone = docker_ops.engine_gone(exc)
        text = str(exc) if isinstance(exc, ContagentError) else f"{type(exc).__name__}: {exc}"
        run.error = (gone or text).splitlines()[0][:500]
        run.stop_here = docker_ops.ENGINE_STOP if gone else None
        log.warning("rollout %s: %s", name, run.error)
    finally:
        if proxy is not None:
            proxy.stop()
        if run.stop_here is None:  # an engine that is gone would only refuse again
            _clean_up(ctx, name)
    unrecorded = proxy.proxy.record_errors if proxy is not None else []
    if unrecorded and run.error is None:
        # the raw log misses part of what happened: no verdict may be claimed from it
        run.error = f"the raw exchange log is incomplete: {unrecorded[0]}"
        run.stop_here = LOG_DIR_STOP
    return run


def _clean_up(ctx: RunContext, name: str) -> None:
    try:
        docker_ops.remove_labelled(
            ctx.client, {docker_ops.LABEL_RUN: ctx.config.run_id, docker_ops.LABEL_ROLLOUT: name}
        )
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        log.warning("rollout %s: clean-up failed: %s", name, exc)


def _judge(
    ctx: RunContext, plan: RolloutPlan, phases: RolloutPhases, run: _Run, report: AgentReport
) -> tuple[RolloutStatus, str | None, str | None]:
    """The verdict: status, error and stop condition."""
    status: RolloutStatus
    error = run.error
    if error is not None:
        status = "infra_error"
    elif ctx.cancel.is_set():
        status, error = "infra_error", ctx.cancel_reason
    else:
        status, error = phases.verdict()
    stop_condition = "timeout" if status == "timeout" else (run.stop_here or report.stop_condition)
    if status == "agent_error":
        error = report.error or error
        # the agent failed because the LLM server failed it: not the model's doing
        failure = server_failure(ctx.paths.rollout(plan.name).raw_log)
        if failure is not None:
            status, error, stop_condition = "infra_error", failure, LLM_SERVER_STOP
    return status, error, stop_condition
