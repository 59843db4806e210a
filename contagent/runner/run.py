"""``contagent run``: every rollout of every experiment, ``--jobs`` at a time."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import replace
from pathlib import Path

from contagent.agents import get_agent, unhonoured
from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.proxy.identify import TokenPlan
from contagent.proxy.token_route import RouteChoice
from contagent.rawlog.result import RolloutResult, load_result
from contagent.runner import docker_ops
from contagent.runner.config import FINISHED_STATUSES, RunConfig
from contagent.runner.executors.executor import OnStarted, RolloutExecutor
from contagent.runner.executors.local_executor import LocalExecutor
from contagent.runner.lifecycle.rollout import LOG_DIR_STOP, LogDirError, RolloutPlan
from contagent.runner.preflight import LlmServer, wait_until_ready
from contagent.runner.stopping import leftovers
from contagent.runner.stopping.failfast import FailFast
from contagent.runner.stopping.signals import signal_name, stop_signal
from contagent.runner.summary import RunEvent, RunSummary
from contagent.runner.tasks.kinds import agent_problems, discover_tasks, internet_note
from contagent.runner.tasks.task_kind import Task
from contagent.versions import NewerVersionError

log = logging.getLogger(__name__)


def _read_result(path: Path) -> RolloutResult | None:
    """A rollout's earlier result, or None when it has none this contagent can use (the
    rollout runs again); a newer one raises: running it again would overwrite it."""
    try:
        return load_result(path)
    except NewerVersionError:
        raise
    except ContagentError:
        return None


def prepare_rollouts(
    paths: RunPaths, plans: list[RolloutPlan], resume: bool
) -> tuple[list[RolloutPlan], list[RolloutResult]]:
    """Which rollouts still need running; with --resume, unfinished attempts are moved aside."""
    by_name: dict[str, RolloutPlan] = {}
    for plan in plans:
        other = by_name.setdefault(plan.name, plan)
        if other is not plan:  # e.g. experiment `a` repeated, beside an experiment `a_r1`
            raise ContagentError(
                f"rollout id {plan.name!r} would name two rollouts (experiment "
                f"{other.experiment.name!r} #{other.repeat_index} and {plan.experiment.name!r} "
                f"#{plan.repeat_index}): they would share a log folder; rename an experiment"
            )
    todo: list[RolloutPlan] = []
    done: list[RolloutResult] = []
    for plan in plans:
        existing = [p for p in paths.files_of(plan.name) if p.exists()]
        if not existing:
            todo.append(plan)
            continue
        if not resume:
            raise ContagentError(
                f"{paths.root} already holds rollout {plan.name}; pass --resume to continue that run "
                "or choose another --log-dir"
            )
        previous = _read_result(paths.rollout(plan.name).result)
        if previous is not None and previous.status in FINISHED_STATUSES:
            done.append(previous)
            continue
        aside = paths.superseded_dir / f"{plan.name}-{time.strftime('%Y%m%dT%H%M%S')}"
        aside.mkdir(parents=True, exist_ok=True)
        for p in existing:
            shutil.move(str(p), str(aside / p.name))
        todo.append(plan)
    return todo, done


def plan_rollouts(config: RunConfig, experiments: list[Task]) -> list[RolloutPlan]:
    """Every (experiment, repeat, agent); names carry the agent when there are several."""
    several = len(config.agents) > 1
    return [
        RolloutPlan(exp, k, agent, agent_in_name=several)
        for exp in experiments
        for k in range(config.repeat)
        for agent in config.agents
    ]


def open_executor(config: RunConfig, paths: RunPaths, on_started: OnStarted) -> RolloutExecutor:
    """The executor ``config`` asks for, its runner images checked; raises :class:`ContagentError`."""
    if config.ray_address is None:
        return LocalExecutor(config, paths, on_started)
    from contagent.runner.executors.ray_executor import RayExecutor

    return RayExecutor(config, paths, on_started)


def run_experiments(
    config: RunConfig, on_event: Callable[[RunEvent], None] | None = None
) -> RunSummary:
    """Run the experiments of ``config``; bad experiments are reported and skipped."""
    emit = on_event or (lambda _e: None)
    t0 = time.monotonic()
    if not config.owner:
        config = replace(config, owner=docker_ops.default_owner())
    if config.driver is None:
        config = replace(config, driver=leftovers.Driver.this_process())
    summary, plans = _plan(config, emit)
    paths = RunPaths(Path(config.log_dir))
    paths.root.mkdir(parents=True, exist_ok=True)
    todo, done = prepare_rollouts(paths, plans, config.resume)
    summary.resumed = done
    executor: RolloutExecutor | None = None
    if todo:
        if config.ray_address is None:
            _sweep(config, emit)
        executor = open_executor(config, paths, lambda name: emit(RunEvent("started", name=name)))
        todo = _ready(executor, todo, summary, emit)
    emit(RunEvent("planned", total=len(todo) + len(done)))
    for result in done:
        emit(RunEvent("skipped", name=result.rollout_id, result=result))
    if executor is None or not todo:
        if executor is not None:
            executor.close()
        summary.wall_s = time.monotonic() - t0
        return summary

    server = LlmServer(
        config.upstream_url, config.llm.served_model_name, config.api_key, config.upstream_ca
    )

    def wait_for_server(seconds: float) -> float:
        return wait_until_ready(server, seconds, lambda m: emit(RunEvent("waiting", message=m)))

    tokens = _token_plan(config, server, executor, wait_for_server, emit)
    said = RouteChoice(*config.routes).start_line(tokens.line, tokens.record)
    for line in (said, *tokens.details):
        emit(RunEvent("ready", message=line))
    queue = [
        replace(plan, tokens=tokens.record, server=tokens.server, sampling_server=tokens.sampling)
        for plan in todo
    ]
    _run_queue(config, executor, queue, summary, wait_for_server, emit)
    if config.ray_address is None:
        summary.left = leftovers.left_by_run(config.run_id)
        if summary.left != []:
            emit(RunEvent("left", message=leftovers.describe(summary.left, config.run_id)))
    summary.wall_s = time.monotonic() - t0
    return summary


def _plan(
    config: RunConfig, emit: Callable[[RunEvent], None]
) -> tuple[RunSummary, list[RolloutPlan]]:
    """The run's rollouts, and its summary holding the experiments skipped as bad; each
    problem and notice is said."""
    experiments, problems = discover_tasks(
        config.experiments_dir,
        list(config.experiments) or None,
        config.skills_dir,
        frozenset(config.task_env),
    )
    refused = agent_problems(experiments, config.agents)
    problems += refused
    experiments = [e for e in experiments if e.name not in {p.name for p in refused}]
    summary = RunSummary(run_id=config.run_id, log_dir=config.log_dir, problems=problems)
    for problem in problems:
        emit(RunEvent("problem", name=problem.name, message=problem.message))
    note = internet_note(experiments, config.allow_internet)
    if note is not None:
        emit(RunEvent("notice", name="network", message=note))
    plans = plan_rollouts(config, experiments)
    llm = config.llm
    requested = {
        "max_iterations": config.max_iterations,
        "temperature": llm.temperature,
        "top_p": llm.top_p,
        "reasoning_effort": llm.reasoning_effort,
        "max_output_tokens": llm.max_output_tokens,
        "extra_body": llm.extra_body,
    }
    for plan in plans:
        notice = unhonoured(get_agent(plan.agent), plan.experiment.skills_wanted, requested)
        if notice is not None and plan.repeat_index == 0:
            emit(RunEvent("notice", name=plan.name, message=notice))
    return summary, plans


def _token_plan(
    config: RunConfig,
    server: LlmServer,
    executor: RolloutExecutor,
    wait_for_server: Callable[[float], float],
    emit: Callable[[RunEvent], None],
) -> TokenPlan:
    """Wait for the LLM server, then what token data the run records from it; before any
    container or network exists. The executor is closed when either fails."""
    if not any(get_agent(a).api != "none" for a in config.agents):
        # the oracle alone: no agent of the run talks to an LLM
        return TokenPlan(record=False, server=None, line="no LLM: no agent of this run uses one")
    try:
        waited = wait_for_server(config.wait_for_llm_s)
    except BaseException:
        executor.close()
        raise
    emit(RunEvent("ready", message=f"LLM server ready after {waited:.0f} s: {server.tried}"))
    try:
        return server.token_plan(config.tokens, config.chat_template)
    except BaseException:
        executor.close()
        raise


def _run_queue(
    config: RunConfig,
    executor: RolloutExecutor,
    queue: list[RolloutPlan],
    summary: RunSummary,
    wait_for_server: Callable[[float], float],
    emit: Callable[[RunEvent], None],
) -> None:
    """Run the queued rollouts ``config.jobs`` at a time into ``summary``, held back while
    the LLM server is down, stopped on a signal; the executor is closed at the end."""
    guard = FailFast(config.wait_for_llm_s)
    # the next rollouts would end the same way; on Ray an engine is one node's, not the run's
    run_stops = {LOG_DIR_STOP} | ({docker_ops.ENGINE_STOP} if config.ray_address is None else set())

    def collect(fut: Future[RolloutResult]) -> RolloutResult | None:
        try:
            result = fut.result()
        except LogDirError as exc:  # no result.json: --resume runs it again
            _stop(str(exc), queue, summary, executor, emit)
            return None
        summary.results.append(result)
        emit(RunEvent("finished", name=result.rollout_id, result=result))
        if result.stop_condition in run_stops:
            _stop(result.error or str(result.stop_condition), queue, summary, executor, emit)
        return result

    pending: set[Future[RolloutResult]] = set()
    try:
        while queue or pending:
            _hold_back(guard, wait_for_server, executor, queue, summary, emit)
            while queue and len(pending) < config.jobs and not summary.interrupted:
                pending.add(executor.submit(queue.pop(0)))
            if not pending:
                break
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in finished:
                got = collect(fut)
                if got is not None:
                    guard.observe(got)
    except KeyboardInterrupt as exc:
        executor.cancel(f"interrupted by {signal_name(stop_signal(exc))}")
        summary.interrupted = True
        summary.signal = stop_signal(exc)
        emit(RunEvent("stopping", message=_stopping(summary, len(pending))))
        for fut in pending:
            try:
                collect(fut)
            except KeyboardInterrupt:
                break
    finally:
        executor.close()


def _ready(
    executor: RolloutExecutor,
    todo: list[RolloutPlan],
    summary: RunSummary,
    emit: Callable[[RunEvent], None],
) -> list[RolloutPlan]:
    """The plans whose tasks the executor made ready; each (task, agent) it refused is a
    problem, reported, and its rollouts are not run."""
    try:
        refused = executor.prepare(todo)
    except BaseException:
        executor.close()
        raise
    for problem in refused:
        summary.problems.append(problem)
        emit(RunEvent("problem", name=problem.name, message=problem.message))
    out = {(p.name, p.agent) for p in refused}
    return [
        plan
        for plan in todo
        if (plan.experiment.name, plan.agent) not in out and (plan.experiment.name, None) not in out
    ]


def _stopping(summary: RunSummary, running: int) -> str:
    return (
        f"{signal_name(summary.signal or 2)}: stopping {running} running rollout(s) and "
        "removing the run's containers and networks (a second signal leaves them to "
        f"`contagent gc --run-id {summary.run_id}`)"
    )


def _sweep(config: RunConfig, emit: Callable[[RunEvent], None]) -> None:
    """Remove what runs of this owner whose driver died on this host left behind."""
    assert config.driver is not None
    try:
        client = docker_ops.connect()
    except ContagentError:
        return  # the executor says so in its own words
    try:
        for line in leftovers.sweep(client, config.owner, config.driver).lines:
            emit(RunEvent("leftovers", message=line))
    finally:
        client.close()


def _stop(
    reason: str,
    queue: list[RolloutPlan],
    summary: RunSummary,
    executor: RolloutExecutor,
    emit: Callable[[RunEvent], None],
) -> None:
    """Stop the run: queued rollouts are not started, running ones end as infra_error."""
    if summary.stopped is not None:
        return
    summary.stopped = reason
    summary.not_started = [plan.name for plan in queue]
    queue.clear()
    executor.cancel(f"run stopped: {reason}")
    emit(RunEvent("stopped", message=reason))


def _hold_back(
    guard: FailFast,
    wait_for_server: Callable[[float], object],
    executor: RolloutExecutor,
    queue: list[RolloutPlan],
    summary: RunSummary,
    emit: Callable[[RunEvent], None],
) -> None:
    """While rollouts keep ending on the LLM server, start none until it is back; stop the
    run when it is not back in time (also with nothing queued: running rollouts cannot
    finish without it)."""
    if not guard.paused or summary.interrupted or summary.stopped:
        return
    emit(RunEvent("paused", message=f"{guard.streak} rollouts in a row ended on the LLM server"))
    reason = guard.recheck(wait_for_server)
    if reason is None:
        emit(RunEvent("ready", message="LLM server back; rollouts go on"))
        return
    _stop(reason, queue, summary, executor, emit)
