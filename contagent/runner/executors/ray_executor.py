"""Rollouts as Ray tasks on a cluster (``contagent run --ray-address``).

Each rollout is one Ray task asking for ``--rollout-cpus``. On its node the task
runs the rollout exactly as the local runner does (that node's Docker engine and
runner image, its own isolated network and recording proxy, clean-up by label),
writing into a scratch folder on the node, and returns the files as one archive
with the SHA-256 of every file. The driver checks every sum and moves the files
into ``--log-dir``, the rollout folder last and in one rename: a rollout there is
complete or absent. When a node is lost, Ray runs the task again on another node;
the lost attempt never wrote into ``--log-dir``.

Ray is imported only here, and only when a run asks for a cluster.
"""

from __future__ import annotations

import logging
import shutil
import signal
import socket
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import docker.errors

from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.runner import docker_ops
from contagent.runner.config import RunConfig
from contagent.runner.executors.executor import OnStarted
from contagent.runner.executors.ray_prepare import node_problems, prepare_on_node, where
from contagent.runner.executors.transfer import Shipment, land, pack, record_failure, set_aside
from contagent.runner.lifecycle.rollout import RolloutPlan, RunContext, compact_finished
from contagent.runner.tasks.experiment import ExperimentProblem
from contagent.runner.tasks.kinds import run_task_rollout

log = logging.getLogger(__name__)

#: Times Ray runs a rollout's task again after its node or worker process was lost.
TASK_RETRIES = 3
#: Seconds the per-node checks (image before the run, clean-up after it) may take.
NODE_CHECK_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class NodeJob:
    """What a node needs for one rollout: its files travel with it (nodes share no disk)."""

    config: RunConfig
    plan: RolloutPlan
    inputs: bytes  # tar: experiment/ (the experiment folder), skills/<name>/, upstream-ca.pem
    has_ca: bool


# --- on the node ---------------------------------------------------------------------------


def _node_name() -> str:
    import ray

    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:12]}"


def image_problem(images: list[tuple[str, str]]) -> str | None:
    """Why this node cannot run rollouts in the (agent, image) pairs, or None (a tiny task
    per node)."""
    try:
        client = docker_ops.connect()
    except ContagentError as exc:
        return str(exc)
    try:
        for agent, image in images:
            docker_ops.check_runner_image(client, image, agent)
    except ContagentError as exc:
        return str(exc)
    finally:
        client.close()
    return None


def remove_run(run_id: str, timeout_s: float = 120.0) -> None:
    """Remove what the run left in this node's Docker engine, until nothing is left.

    An interrupted rollout may still be removing its own containers meanwhile (the
    engine then answers 409), so this tries again until no object carries the label.
    """
    labels = {docker_ops.LABEL_RUN: run_id}
    client = docker_ops.connect()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                docker_ops.remove_labelled(client, labels)
                if not docker_ops.leftovers(client, labels):
                    return
            except docker.errors.APIError as exc:
                log.info("run %s: clean-up busy: %s", run_id, exc)
            if time.monotonic() > deadline:
                left = ", ".join(docker_ops.leftovers(client, labels))
                raise ContagentError(f"run {run_id}: still in Docker after {timeout_s:g} s: {left}")
            time.sleep(1.0)
    finally:
        client.close()


def run_on_node(job: NodeJob) -> Shipment:
    """The Ray task of one rollout."""
    return run_here(job, _node_name())


def run_here(job: NodeJob, node: str) -> Shipment:
    """Run ``job`` on this host's Docker engine in a scratch folder and pack its files."""
    cfg, name = job.config, job.plan.name
    scratch = Path(tempfile.mkdtemp(prefix=f"contagent-{cfg.run_id}-{name}-"))
    client = docker_ops.connect()
    try:
        inputs = scratch / "inputs"
        docker_ops.extract_tar([job.inputs], inputs)
        exp = job.plan.experiment
        here = replace(
            cast(Any, exp),  # every task kind is a frozen dataclass with these fields
            root=inputs / "experiment",
            skill_dirs=tuple(inputs / "skills" / d.name for d in exp.skill_dirs),
        )
        ca = inputs / "upstream-ca.pem" if job.has_ca else None
        config = replace(cfg, log_dir=scratch / "log", upstream_ca=ca)
        paths = RunPaths(scratch / "log")
        paths.root.mkdir()
        # A lost attempt of this rollout may have left its containers on this engine.
        docker_ops.remove_labelled(
            client, {docker_ops.LABEL_RUN: cfg.run_id, docker_ops.LABEL_ROLLOUT: name}
        )
        ctx = RunContext(config, paths, client, threading.Event(), node=node)
        _run_interruptible(ctx, replace(job.plan, experiment=here))  # agent and name kept
        compact_finished(paths.rollout(name))  # ships ~1% of the bytes
        return pack(paths, name, node)
    finally:
        client.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _run_interruptible(ctx: RunContext, plan: RolloutPlan) -> None:
    """``run_rollout`` in a thread: Ray cancels a task by raising KeyboardInterrupt in its
    main thread, which then tells the rollout to stop, kill its containers and clean up.

    The main thread waits on an event, not on ``Thread.join``: a KeyboardInterrupt inside
    ``join`` can leave the thread marked as finished while it still runs.
    """
    failure: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            run_task_rollout(ctx, plan)
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, name=f"rollout-{plan.name}", daemon=True).start()
    while not done.is_set():
        try:
            done.wait(0.5)
        except KeyboardInterrupt:
            ctx.cancel.set()
    if failure:
        raise failure[0]


# --- on the driver -------------------------------------------------------------------------


def _task_failure(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # a RayTaskError wraps what the task raised
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _inputs(config: RunConfig, plan: RolloutPlan) -> bytes:
    entries: list[tuple[str, Path | bytes, int]] = [("experiment", plan.experiment.root, 0)]
    entries += [(f"skills/{d.name}", d, 0) for d in plan.experiment.skill_dirs]
    if config.upstream_ca is not None:
        entries.append(("upstream-ca.pem", Path(config.upstream_ca).read_bytes(), 0o644))
    return docker_ops.make_tar(entries)


class RayExecutor:
    """Rollouts as Ray tasks; each is landed in ``--log-dir`` by a driver thread."""

    def __init__(self, config: RunConfig, paths: RunPaths, on_started: OnStarted) -> None:
        try:
            import ray
        except ImportError:
            raise ContagentError(
                "--ray-address needs Ray: pip install 'contagent[ray]' (on the driver and every node)"
            ) from None
        self._ray: Any = ray
        self._config, self._paths, self._on_started = config, paths, on_started
        self._owns_connection = not ray.is_initialized()
        if self._owns_connection:
            # ray.init makes SIGTERM a bare sys.exit in the driver; the run's own handling
            # (cancel the tasks, let every node clean up) must stay
            on_term = signal.getsignal(signal.SIGTERM)
            try:
                ray.init(
                    address=config.ray_address, log_to_driver=False, logging_level=logging.WARNING
                )
            except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError, ...
                raise ContagentError(
                    f"cannot join the Ray cluster at {config.ray_address}: {_task_failure(exc)}"
                ) from None
            finally:
                if threading.current_thread() is threading.main_thread() and on_term is not None:
                    signal.signal(signal.SIGTERM, on_term)
        try:
            self._check_nodes()
        except BaseException:
            self._disconnect()
            raise
        if paths.incoming_dir.is_dir():  # an earlier driver stopped while moving files in
            for stale in sorted(paths.incoming_dir.iterdir()):
                set_aside(paths, stale)
        self._task = ray.remote(num_cpus=config.rollout_cpus, max_retries=TASK_RETRIES)(run_on_node)
        self._lock = threading.Lock()
        self._inflight: dict[str, Any] = {}
        self._cancelled = threading.Event()
        self._cancel_reason = "interrupted"
        self._pool = ThreadPoolExecutor(max_workers=config.jobs, thread_name_prefix="ray-rollout")

    def _on_each_node(
        self,
        fn: Any,
        nodes: list[dict[str, Any]],
        *args: Any,
        timeout: float | None = NODE_CHECK_TIMEOUT_S,
    ) -> list[Any]:
        """Run ``fn(*args)`` once on every node in ``nodes``; the results in that order."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = self._ray.remote(num_cpus=0, max_retries=0)(fn)
        refs = [
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(*args)
            for n in nodes
        ]
        return list(self._ray.get(refs, timeout=timeout))

    def _check_nodes(self) -> None:
        cpus = self._config.rollout_cpus
        nodes = [
            n
            for n in self._ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= cpus
        ]
        if not nodes:
            raise ContagentError(
                f"no node of the Ray cluster at {self._config.ray_address} has the "
                f"--rollout-cpus {cpus:g} CPUs a rollout asks for"
            )
        try:
            problems = self._on_each_node(image_problem, nodes, self._config.runner_images())
        except self._ray.exceptions.RayError as exc:  # a node lost, or no answer in time
            raise ContagentError(
                f"checking the runner image on the Ray nodes failed: {_task_failure(exc)}"
            ) from None
        for node, problem in zip(nodes, problems, strict=True):
            if problem:
                raise ContagentError(f"Ray node {where(node)}: {problem}")
        self._nodes = nodes

    def prepare(self, plans: list[RolloutPlan]) -> list[ExperimentProblem]:
        """Every node that may run a rollout builds (or finds) the images of every task and
        agent before any rollout starts: a task the agent cannot run on is a problem, and
        a node that cannot build an image refuses the run, named in one line."""
        tasks = list({p.experiment.name: p.experiment for p in plans}.values())
        agents = sorted({p.agent for p in plans})
        inputs = docker_ops.make_tar([(str(i), t.root, 0) for i, t in enumerate(tasks)])
        try:
            answers = self._on_each_node(
                prepare_on_node, self._nodes, self._config, tasks, agents, inputs, timeout=None
            )
        except self._ray.exceptions.RayError as exc:
            raise ContagentError(
                f"building the task images on the Ray nodes failed: {_task_failure(exc)}"
            ) from None
        return node_problems(self._nodes, answers, {t.name: t for t in tasks})

    def _one(self, plan: RolloutPlan) -> RolloutResult:
        started = time.time()
        if self._cancelled.is_set():
            return record_failure(self._paths, self._config, plan, self._cancel_reason, started)
        try:
            inputs = _inputs(self._config, plan)
        except OSError as exc:  # the experiment folder changed under the run
            reason = f"cannot pack the experiment: {exc}"
            return record_failure(self._paths, self._config, plan, reason, started)
        has_ca = self._config.upstream_ca is not None
        ref = self._task.remote(NodeJob(self._config, plan, inputs, has_ca))
        with self._lock:
            self._inflight[plan.name] = ref
        self._on_started(plan.name)
        try:
            shipment: Shipment = self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:  # Ray already retried a lost node's task
            reason = _task_failure(exc)
            if self._cancelled.is_set():
                reason = f"{self._cancel_reason} ({reason})"
            return record_failure(self._paths, self._config, plan, reason, started)
        finally:
            with self._lock:
                self._inflight.pop(plan.name, None)
        try:
            return land(self._paths, plan.name, shipment)
        except ContagentError as exc:
            return record_failure(self._paths, self._config, plan, str(exc), started)

    def submit(self, plan: RolloutPlan) -> Future[RolloutResult]:
        return self._pool.submit(self._one, plan)

    def cancel(self, reason: str = "interrupted") -> None:
        self._cancel_reason = reason
        self._cancelled.set()
        with self._lock:
            refs = list(self._inflight.values())
        for ref in refs:
            # Not force: the task's KeyboardInterrupt stops the rollout, which cleans up.
            self._ray.cancel(ref)

    def close(self) -> None:
        try:
            self._pool.shutdown(wait=True, cancel_futures=True)
            alive = [n for n in self._ray.nodes() if n.get("Alive")]
            try:
                # Belt and braces on every node: nothing of this run may outlive it.
                self._on_each_node(remove_run, alive, self._config.run_id)
            except self._ray.exceptions.RayError as exc:
                log.warning("clean-up on the Ray nodes failed: %s", _task_failure(exc))
        finally:
            self._disconnect()

    def _disconnect(self) -> None:
        if self._owns_connection:
            self._ray.shutdown()
