"""Before a Ray run's first rollout: every node builds (or finds) the images of every task
and agent, so that each rollout finds them cached on the node that runs it.

A task the agent cannot run on (:class:`~contagent.runner.images.agent_image.TaskRefused`) is a
problem of that task; any other failure is the node's, and refuses the run naming it.
Ray is not imported here: these run as Ray tasks, started by the executor.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import docker.errors

from contagent.errors import ContagentError
from contagent.runner import docker_ops
from contagent.runner.config import RunConfig
from contagent.runner.images.agent_image import TaskRefused
from contagent.runner.tasks.experiment import ExperimentProblem
from contagent.runner.tasks.kinds import prepare_task
from contagent.runner.tasks.task_kind import Task

#: what a node says of one (task, agent) it could not prepare: (task, agent, refused, why);
#: ``refused``: the task cannot run with the agent anywhere, else this node cannot build
Unprepared = tuple[str, str, bool, str]


def prepare_on_node(
    config: RunConfig, tasks: list[Task], agents: list[str], inputs: bytes
) -> list[Unprepared]:
    """Build (or find) on this node's engine the images of every task with every agent, so
    that a rollout finds them cached wherever it runs (a tiny task per node)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"contagent-{config.run_id}-prepare-"))
    client = docker_ops.connect()
    found: list[Unprepared] = []
    try:
        docker_ops.extract_tar([inputs], scratch)
        for i, task in enumerate(tasks):
            here = replace(cast(Any, task), root=scratch / str(i), skill_dirs=())
            labels = {
                docker_ops.LABEL_RUN: config.run_id,
                docker_ops.LABEL_OWNER: config.owner,
                docker_ops.LABEL_ROLLOUT: f"{task.name}-prepare",
                docker_ops.LABEL_ROLE: "prepare",
            }
            for agent in agents:
                try:
                    prepare_task(client, config, here, agent, labels)
                except TaskRefused as exc:
                    found.append((task.name, agent, True, str(exc)))
                except (ContagentError, docker.errors.DockerException, OSError) as exc:
                    text = str(exc) if isinstance(exc, ContagentError) else repr(exc)
                    found.append((task.name, agent, False, text.splitlines()[0][:300]))
    finally:
        client.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return found


def where(node: dict[str, Any]) -> str:
    """How a one-line message names a Ray node: its address and node id's first characters."""
    return f"{node.get('NodeManagerAddress')}/{str(node.get('NodeID'))[:12]}"


def node_problems(
    nodes: list[dict[str, Any]], answers: list[list[Unprepared]], tasks: dict[str, Task]
) -> list[ExperimentProblem]:
    """The tasks refused for an agent on any node; ContagentError naming the first node
    that could not build an image (the run then starts no rollout)."""
    problems: dict[tuple[str, str], ExperimentProblem] = {}
    for node, found in zip(nodes, answers, strict=True):
        for name, agent, refused, why in found:
            if not refused:
                raise ContagentError(
                    f"Ray node {where(node)} cannot build the image of task {name} "
                    f"for {agent}: {why}"
                )
            message = f"{tasks[name].root}: {agent}: {why}"
            problems.setdefault((name, agent), ExperimentProblem(name, message, agent=agent))
    return list(problems.values())
