"""The task kinds ``contagent run`` takes, and the one place a folder's kind is chosen.

A kind recognises its folders by a marker file, loads one into a
:class:`~contagent.runner.tasks.task_kind.Task` (or raises ContagentError with a
one-line reason), and supplies the phases of one rollout, which the shared lifecycle
runs. Each kind is its modules and one :class:`TaskKind` line in :data:`KINDS`:
seed experiments (``experiment.json``; ``experiment.py`` and ``seed_rollout.py``)
and Harbor tasks (``task.toml``; ``harbor_task.py``, ``harbor_phases.py`` and
``harbor_rollout.py``).
A folder is of the first kind that recognises it; one no kind recognises is
loaded as a seed experiment, whose error names the missing ``experiment.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker

from contagent.agents import LAYERS
from contagent.errors import ContagentError
from contagent.rawlog.result import RolloutResult
from contagent.runner.config import RunConfig
from contagent.runner.images import agent_image
from contagent.runner.lifecycle.rollout import RolloutPlan, RunContext
from contagent.runner.lifecycle.rollout_lifecycle import PhasesFactory, run_rollout
from contagent.runner.tasks.experiment import (
    EXPERIMENT_FILE,
    ExperimentProblem,
    experiment_roots,
    load_experiment,
)
from contagent.runner.tasks.harbor_rollout import HarborPhases
from contagent.runner.tasks.harbor_task import TASK_FILE, HarborTask, load_harbor_task
from contagent.runner.tasks.seed_rollout import SeedPhases
from contagent.runner.tasks.task_kind import Task

#: ``prepare(client, config, task, agent, labels)``: make and check, on this engine and
#: before any rollout, what rollouts of ``task`` with ``agent`` need (images to build,
#: limits to apply); containers it creates carry ``labels``. Raises
#: :class:`~contagent.runner.images.agent_image.TaskRefused` for what no engine could fix,
#: ContagentError (or Docker's errors) for this engine's trouble.
Prepare = Callable[[docker.DockerClient, RunConfig, Task, str, dict[str, str]], None]


def _nothing(
    client: docker.DockerClient, config: RunConfig, task: Task, agent: str, labels: dict[str, str]
) -> None:
    """A kind whose rollouts need nothing but the runner image (checked when the executor
    opens) prepares nothing."""


@dataclass(frozen=True)
class TaskKind:
    """A kind of task folder: how it is recognised and loaded, what an engine must prepare
    for it, and the phases of one of its rollouts (the lifecycle runs them)."""

    name: str
    #: the file whose presence marks a folder of this kind
    marker: str
    #: ``load(root, skills_dir, task_env)``: the checked task, or ContagentError with a
    #: one-line reason; ``task_env``: the host variables its values may read (``--task-env``)
    load: Callable[[Path, Path | None, frozenset[str]], Task]
    #: the phases and outcome of one rollout (:class:`~contagent.runner.lifecycle.rollout_lifecycle.RolloutPhases`)
    phases: PhasesFactory
    prepare: Prepare = _nothing

    def recognises(self, root: Path) -> bool:
        """Whether ``root`` is a folder of this kind (its marker file is there)."""
        return (root / self.marker).is_file()

    def run_rollout(self, ctx: RunContext, plan: RolloutPlan) -> RolloutResult:
        """Run one rollout of one of its tasks and write its files; never raises for
        Docker trouble (that is the rollout's ``infra_error``)."""
        return run_rollout(ctx, plan, self.phases)


def _prepare_harbor(
    client: docker.DockerClient, config: RunConfig, task: Task, agent: str, labels: dict[str, str]
) -> None:
    """The task image and the agent layered onto it, built once and cached on this
    engine; the storage limit checked."""
    assert isinstance(task, HarborTask)
    runner = config.image_for(agent) or None  # an agent with nothing to layer has none
    agent_image.prepare(client, task, agent, runner, LAYERS.get(agent), config.owner, labels)


def _load_seed(root: Path, skills_dir: Path | None, task_env: frozenset[str]) -> Task:
    return load_experiment(root, skills_dir)


def _load_harbor(root: Path, skills_dir: Path | None, task_env: frozenset[str]) -> Task:
    return load_harbor_task(root, task_env)


SEED = TaskKind("seed", EXPERIMENT_FILE, _load_seed, SeedPhases)
#: Every kind, by name; a folder is of the first that recognises it.
KINDS: dict[str, TaskKind] = {
    k.name: k
    for k in (SEED, TaskKind("harbor", TASK_FILE, _load_harbor, HarborPhases, _prepare_harbor))
}


def kind_of(root: Path) -> TaskKind:
    return next((k for k in KINDS.values() if k.recognises(root)), SEED)


def prepare_task(
    client: docker.DockerClient,
    config: RunConfig,
    task: Task,
    agent: str,
    labels: dict[str, str],
) -> None:
    """What rollouts of ``task`` with ``agent`` need from this engine, the way its kind
    makes it (see :meth:`TaskKind.prepare`)."""
    KINDS[task.kind].prepare(client, config, task, agent, labels)


def run_task_rollout(ctx: RunContext, plan: RolloutPlan) -> RolloutResult:
    """One rollout, run the way its task's kind runs one."""
    return KINDS[plan.experiment.kind].run_rollout(ctx, plan)


def discover_tasks(
    experiments_dir: Path,
    names: list[str] | None,
    skills_dir: Path | None,
    task_env: frozenset[str] = frozenset(),
) -> tuple[list[Task], list[ExperimentProblem]]:
    """Load every task folder under ``experiments_dir`` (or only ``names``), any kind."""
    roots = experiment_roots(experiments_dir, names)
    loaded: list[Task] = []
    problems: list[ExperimentProblem] = []
    for root in roots:
        try:
            loaded.append(kind_of(root).load(root, skills_dir, task_env))
        except ContagentError as exc:
            problems.append(ExperimentProblem(name=root.name, message=str(exc)))
    return loaded, problems


def agent_problems(tasks: list[Task], agents: tuple[str, ...]) -> list[ExperimentProblem]:
    """Tasks an agent of the run cannot run: the oracle needs the task's solution."""
    from contagent.agents import get_agent
    from contagent.agents.base import runs_solution

    solvers = [a for a in agents if runs_solution(get_agent(a))]
    if not solvers:
        return []
    return [
        ExperimentProblem(
            name=task.name,
            message=f"{task.root}: --agent {solvers[0]} runs a Harbor task's solution/solve.sh; "
            "this task has none",
        )
        for task in tasks
        if not task.has_solution
    ]


def internet_note(tasks: list[Task], allow_internet: bool) -> str | None:
    """The one line on the tasks that ask for the internet while the agent works."""
    asking = [t for t in tasks if t.wants_internet]
    if not asking:
        return None
    if allow_internet:
        return (
            f"{len(asking)} task(s) ask for the internet; --allow-internet gives the agent a "
            "route out (its LLM still goes through the recording proxy)"
        )
    return (
        f"{len(asking)} task(s) ask for the internet; the agent phase stays isolated (only the "
        "recording proxy is reachable; --allow-internet gives a route out)"
    )
