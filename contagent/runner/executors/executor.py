"""Where rollouts run: the seam between ``contagent run``'s scheduling loop and the machines.

The loop (``run.py``) hands each :class:`RolloutPlan` to an executor, at most
``--jobs`` at a time, and collects :class:`RolloutResult` futures. An executor
writes every rollout's files into ``--log-dir`` before its future completes.

* ``contagent.runner.executors.local_executor.LocalExecutor``: a thread pool on this host's
  Docker engine (the default);
* ``contagent.runner.executors.ray_executor.RayExecutor``: one Ray task per rollout on a
  cluster (``--ray-address``); imported only when asked for, so the local runner
  never imports Ray.

``contagent.runner.run`` picks one; this module holds only what they share.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from contagent.rawlog.result import RolloutResult
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.runner.tasks.experiment import ExperimentProblem

#: Told the name of each rollout as it starts.
OnStarted = Callable[[str], None]


class RolloutExecutor(Protocol):
    """Runs rollouts somewhere and lands their files in ``--log-dir``."""

    def prepare(self, plans: list[RolloutPlan]) -> list[ExperimentProblem]:
        """Before any rollout, make what the plans' tasks need where they will run (a Harbor
        task's images); each (task, agent) that cannot run is one problem naming why.
        Raises :class:`~contagent.errors.ContagentError` when a machine cannot make them."""
        ...

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
