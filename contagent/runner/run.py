"""``contagent run``: every rollout of every experiment, ``--jobs`` at a time."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import ValidationError

from contagent.agents import get_agent, unhonoured
from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.records import RolloutResult
from contagent.runner import docker_ops
from contagent.runner.config import FINISHED_STATUSES, RunConfig
from contagent.runner.executor import open_executor
from contagent.runner.experiment import Experiment, ExperimentProblem, discover_experiments
from contagent.runner.rollout import RolloutPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunEvent:
    """A progress notification: ``kind`` is planned, problem, skipped, started or finished."""

    kind: str
    name: str = ""
    total: int = 0
    result: RolloutResult | None = None
    message: str = ""


@dataclass
class RunSummary:
    run_id: str
    log_dir: Path
    results: list[RolloutResult] = field(default_factory=list)
    resumed: list[RolloutResult] = field(default_factory=list)
    problems: list[ExperimentProblem] = field(default_factory=list)
    wall_s: float = 0.0
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        """No bad experiment, no infrastructure error, not interrupted (failed verdicts are data)."""
        return (
            not self.problems
            and not self.interrupted
            and all(r.status != "infra_error" for r in self.results)
        )


def _read_result(path: Path) -> RolloutResult | None:
    try:
        return RolloutResult.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None


def _prepare(
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


def plan_rollouts(config: RunConfig, experiments: list[Experiment]) -> list[RolloutPlan]:
    """Every (experiment, repeat, agent); names carry the agent when there are several."""
    several = len(config.agents) > 1
    return [
        RolloutPlan(exp, k, agent, agent_in_name=several)
        for exp in experiments
        for k in range(config.repeat)
        for agent in config.agents
    ]


def run_experiments(
    config: RunConfig, on_event: Callable[[RunEvent], None] | None = None
) -> RunSummary:
    """Run the experiments of ``config``; bad experiments are reported and skipped."""
    emit = on_event or (lambda _e: None)
    t0 = time.monotonic()
    if not config.owner:
        config = replace(config, owner=docker_ops.default_owner())
    experiments, problems = discover_experiments(
        config.experiments_dir, list(config.experiments) or None, config.skills_dir
    )
    summary = RunSummary(run_id=config.run_id, log_dir=config.log_dir, problems=problems)
    for problem in problems:
        emit(RunEvent("problem", name=problem.name, message=problem.message))
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
        notice = unhonoured(get_agent(plan.agent), tuple(plan.experiment.spec.skills), requested)
        if notice is not None and plan.repeat_index == 0:
            emit(RunEvent("notice", name=plan.name, message=notice))
    paths = RunPaths(Path(config.log_dir))
    paths.root.mkdir(parents=True, exist_ok=True)
    todo, done = _prepare(paths, plans, config.resume)
    summary.resumed = done
    emit(RunEvent("planned", total=len(plans)))
    for result in done:
        emit(RunEvent("skipped", name=result.rollout_id, result=result))
    if not todo:
        summary.wall_s = time.monotonic() - t0
        return summary

    executor = open_executor(config, paths, lambda name: emit(RunEvent("started", name=name)))

    def collect(fut: Future[RolloutResult]) -> None:
        result = fut.result()
        summary.results.append(result)
        emit(RunEvent("finished", name=result.rollout_id, result=result))

    pending: set[Future[RolloutResult]] = set()
    queue = list(todo)
    try:
        while queue or pending:
            while queue and len(pending) < config.jobs and not summary.interrupted:
                pending.add(executor.submit(queue.pop(0)))
            if not pending:
                break
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in finished:
                collect(fut)
    except KeyboardInterrupt:
        executor.cancel()
        summary.interrupted = True
        for fut in pending:
            try:
                collect(fut)
            except KeyboardInterrupt:
                break
    finally:
        executor.close()
    summary.wall_s = time.monotonic() - t0
    return summary
