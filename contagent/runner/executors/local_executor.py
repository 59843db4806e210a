"""The default executor: rollouts in threads of this process, on this host's Docker engine."""

from __future__ import annotations

import logging
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import docker.errors
import requests.exceptions

from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.runner import docker_ops
from contagent.runner.config import RunConfig
from contagent.runner.executors.executor import OnStarted
from contagent.runner.lifecycle.rollout import RolloutPlan, RunContext, compact_finished
from contagent.runner.tasks.experiment import ExperimentProblem
from contagent.runner.tasks.kinds import prepare_task, run_task_rollout
from contagent.runner.tasks.task_kind import Task

log = logging.getLogger(__name__)


class LocalExecutor:
    """Rollouts in threads of this process, on this host's Docker engine."""

    def __init__(self, config: RunConfig, paths: RunPaths, on_started: OnStarted) -> None:
        self._on_started = on_started
        client = docker_ops.connect()
        try:
            for agent, image in config.runner_images():
                docker_ops.check_runner_image(client, image, agent)
        except BaseException:
            client.close()
            raise
        self._ctx = RunContext(
            config=config,
            paths=paths,
            client=client,
            cancel=threading.Event(),
            node=socket.gethostname(),
        )
        self._pool = ThreadPoolExecutor(max_workers=config.jobs, thread_name_prefix="rollout")
        # One thread compacts finished rollouts' logs, so a slot frees as soon as its
        # rollout ends and the compression never holds up the rollouts still running.
        self._compactor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compact")

    def prepare(self, plans: list[RolloutPlan]) -> list[ExperimentProblem]:
        pairs = {(p.experiment.name, p.agent): p.experiment for p in plans}
        with ThreadPoolExecutor(self._ctx.config.jobs, thread_name_prefix="prepare") as pool:
            found = pool.map(lambda kv: self._prepare_one(kv[1], kv[0][1]), sorted(pairs.items()))
            return [p for p in found if p is not None]

    def _prepare_one(self, task: Task, agent: str) -> ExperimentProblem | None:
        labels = self._ctx.labels(f"{task.name}-prepare", "prepare")
        try:
            prepare_task(self._ctx.client, self._ctx.config, task, agent, labels)
        except (
            ContagentError,
            docker.errors.DockerException,
            requests.exceptions.RequestException,
        ) as exc:
            gone = docker_ops.engine_gone(exc)
            if gone:
                raise ContagentError(gone) from None
            text = str(exc) if isinstance(exc, ContagentError) else f"{type(exc).__name__}: {exc}"
            line = text.splitlines()[0][:500] if text else type(exc).__name__
            return ExperimentProblem(task.name, f"{task.root}: {agent}: {line}", agent=agent)
        return None

    def _one(self, plan: RolloutPlan) -> RolloutResult:
        self._on_started(plan.name)
        result = run_task_rollout(self._ctx, plan)
        self._compactor.submit(compact_finished, self._ctx.paths.rollout(plan.name))
        return result

    def submit(self, plan: RolloutPlan) -> Future[RolloutResult]:
        return self._pool.submit(self._one, plan)

    def cancel(self, reason: str = "interrupted") -> None:
        # Running rollouts see the flag, kill their containers and clean up themselves.
        self._ctx.cancel_reason = reason
        self._ctx.cancel.set()

    def close(self) -> None:
        self._ctx.cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._compactor.shutdown(wait=True)
        try:
            # Belt and braces: nothing of this run may outlive it (the run then checks).
            docker_ops.remove_labelled(
                self._ctx.client, {docker_ops.LABEL_RUN: self._ctx.config.run_id}
            )
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            log.warning("run %s: clean-up failed: %s", self._ctx.config.run_id, exc)
        finally:
            self._ctx.client.close()
