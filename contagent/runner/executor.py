"""Where rollouts run: the seam between ``contagent run``'s scheduling loop and the machines.

The loop (``run.py``) hands each :class:`RolloutPlan` to an executor, at most
``--jobs`` at a time, and collects :class:`RolloutResult` futures. An executor
writes every rollout's files into ``--log-dir`` before its future completes.

* :class:`LocalExecutor`: a thread pool on this host's Docker engine (the default);
* ``contagent.runner.ray_executor.RayExecutor``: one Ray task per rollout on a
  cluster (``--ray-address``); imported only when asked for, so the local runner
  never imports Ray.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from contagent.layout import RunPaths
from contagent.records import RolloutResult
from contagent.runner import docker_ops
from contagent.runner.config import RunConfig
from contagent.runner.rollout import RolloutPlan, RunContext, run_rollout

#: Told the name of each rollout as it starts.
OnStarted = Callable[[str], None]


class RolloutExecutor(Protocol):
    """Runs rollouts somewhere and lands their files in ``--log-dir``."""

    def submit(self, plan: RolloutPlan) -> Future[RolloutResult]:
        """Start one rollout; the future's result is written to ``--log-dir`` when it completes."""
        ...

    def cancel(self, reason: str = "interrupted") -> None:
        """Stop every running rollout (each cleans up and still completes its future, as
        ``infra_error`` with ``reason``)."""
        ...

    def close(self) -> None:
        """Wait for the rollouts and remove whatever of this run is left in Docker."""
        ...


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

    def _one(self, plan: RolloutPlan) -> RolloutResult:
        self._on_started(plan.name)
        return run_rollout(self._ctx, plan)

    def submit(self, plan: RolloutPlan) -> Future[RolloutResult]:
        return self._pool.submit(self._one, plan)

    def cancel(self, reason: str = "interrupted") -> None:
        # Running rollouts see the flag, kill their containers and clean up themselves.
        self._ctx.cancel_reason = reason
        self._ctx.cancel.set()

    def close(self) -> None:
        self._ctx.cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            # Belt and braces: nothing of this run may outlive it.
            docker_ops.remove_labelled(
                self._ctx.client, {docker_ops.LABEL_RUN: self._ctx.config.run_id}
            )
        finally:
            self._ctx.client.close()


def open_executor(config: RunConfig, paths: RunPaths, on_started: OnStarted) -> RolloutExecutor:
    """The executor ``config`` asks for, its runner image checked; raises :class:`ContagentError`."""
    if config.ray_address is None:
        return LocalExecutor(config, paths, on_started)
    from contagent.runner.ray_executor import RayExecutor

    return RayExecutor(config, paths, on_started)
