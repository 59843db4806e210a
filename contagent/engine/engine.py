"""The rollout engine: submit tasks in groups, take the groups as they finish.

Everything a rollout does is ``contagent run``'s: the same task folders, agents,
Docker isolation, executors (:func:`~contagent.runner.run.open_executor`), LLM
server checks and recording proxies. The engine adds the scheduling a trainer
needs: groups, bounded concurrency and backpressure, retries of ``infra_error``,
and the policy versions and pauses its proxies share (a
:class:`~contagent.proxy.policy_gate.PolicyGate`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contagent.engine.engine_config import EngineConfig
from contagent.engine.group_build import (
    Group,
    RolloutOutcome,
    build_group,
    export_options,
    off_policy_filter,
    read_finished,
    trainable,
)
from contagent.engine.server_control import PolicyJournal, ServerControl
from contagent.errors import ContagentError
from contagent.export.dataset_folder import rows_to_batch
from contagent.layout import RunPaths
from contagent.proxy.policy_gate import PolicyGate
from contagent.rawlog.result import RolloutResult
from contagent.runner import docker_ops
from contagent.runner.config import FINISHED_STATUSES, RunConfig
from contagent.runner.executors.executor import OnStarted, RolloutExecutor
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.runner.preflight import LlmServer, wait_until_ready
from contagent.runner.run import open_executor, prepare_rollouts
from contagent.runner.stopping import leftovers
from contagent.runner.tasks.kinds import discover_tasks
from contagent.runner.tasks.task_kind import Task

log = logging.getLogger(__name__)

#: Makes the executor rollouts run on: ``open_executor``'s signature.
ExecutorFactory = Callable[[RunConfig, RunPaths, OnStarted], RolloutExecutor]

#: The error of rollouts the engine's stop ends.
STOPPED = "engine stopped"


@dataclass
class _GroupState:
    group_id: int
    task: Task
    agent: str
    size: int
    done: dict[int, RolloutOutcome] = field(default_factory=dict)  # by repeat index


class Engine:
    """A live rollout engine (see the module docstring and docs/engine.md).

    Use as ``async with Engine(config) as engine: ...``; ``executor`` replaces the
    executor ``contagent run`` would open (tests run rollouts in-process with it).
    """

    def __init__(self, config: EngineConfig, *, executor: ExecutorFactory | None = None) -> None:
        run = config.run
        if not run.owner:
            run = replace(run, owner=docker_ops.default_owner())
        if run.driver is None:
            run = replace(run, driver=leftovers.Driver.this_process())
        self.gate = PolicyGate(config.policy_version)
        if run.ray_address is None:
            run = replace(run, policy=self.gate)
        self.config = replace(config, run=run)
        self.paths = RunPaths(Path(run.log_dir))
        self._factory = executor or open_executor
        self.server: ServerControl | None = None
        """vLLM's own version and pause, when the server has them (``server_versions``)."""
        self.journal = PolicyJournal(self.paths.root)
        self._executor: RolloutExecutor | None = None
        self._tokens: tuple[bool, dict[str, Any] | None] = (False, None)
        self._tasks: dict[str, Task] = {}
        self._prepared: set[tuple[str, str]] = set()
        self._repeats: dict[tuple[str, str], int] = {}
        self._next_group = 0
        self._running: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None
        self._room: asyncio.Semaphore | None = None
        self._finished: asyncio.Queue[Group] | None = None
        self._undelivered = 0
        self._stopping = False
        self.errors: list[str] = []

    # -- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the executor and check the LLM server, as ``contagent run`` does before any
        rollout; raises :class:`~contagent.errors.ContagentError` when either fails."""
        self._slots = asyncio.Semaphore(self.config.run.jobs)
        self._room = asyncio.Semaphore(self.config.max_groups)
        self._finished = asyncio.Queue()
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self._executor = await asyncio.to_thread(
            self._factory, self.config.run, self.paths, lambda name: log.info("started %s", name)
        )
        try:
            self._tokens = await asyncio.to_thread(self._preflight)
        except BaseException:
            await asyncio.to_thread(self._executor.close)
            self._executor = None
            raise

    def _preflight(self) -> tuple[bool, dict[str, Any] | None]:
        run = self.config.run
        server = LlmServer(
            run.upstream_url, run.llm.served_model_name, run.api_key, run.upstream_ca
        )
        wait_until_ready(server, run.wait_for_llm_s, lambda m: log.info("%s", m))
        plan = server.token_plan(run.tokens)
        log.info("%s", plan.line)
        self._find_server_versions()
        if self.server is None:
            self.journal.version(self.gate.version)
        rows_to_batch([])  # pyarrow's first conversion imports pandas: not on a group's time
        return plan.record, plan.server

    def _find_server_versions(self) -> None:
        run, mode = self.config.run, self.config.server_versions
        if mode == "off":
            return
        self.server = ServerControl.probe(run.upstream_url, run.api_key, run.upstream_ca)
        if self.server is None:
            if mode == "on":
                raise ContagentError(
                    "the LLM server has no /weight_info: start vLLM with VLLM_SERVER_DEV_MODE=1"
                    " or use server_versions='off'"
                )
            return
        name = self.server.weight_version()
        self._version(self.journal.number(name, self.gate.version), name)
        log.info("policy versions: the server's weight_version %r is %d", name, self.gate.version)

    async def stop(self) -> None:
        """Stop as Ctrl-C stops a run: running rollouts are cancelled (their containers and
        networks removed, each left as ``infra_error`` for ``contagent run --resume``),
        held requests are let go, and nothing more is delivered."""
        self._stopping = True
        executor, self._executor = self._executor, None
        if executor is None:
            return
        executor.cancel(STOPPED)
        self.gate.resume()
        # the close runs to its end even when this task is cancelled (a second Ctrl-C, a
        # worker cancelling its loop): it waits for the rollouts' clean-up and their logs'
        # compaction, which a cancelled wait would leave running, or never started
        closing = asyncio.ensure_future(self._close(executor))
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            await asyncio.wait({closing})
            raise

    async def _close(self, executor: RolloutExecutor) -> None:
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        await asyncio.to_thread(executor.close)

    # -- policy ---------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self.gate.version

    def set_policy_version(self, version: int) -> None:
        """New weights are live: exchanges from now on are stamped ``version`` (a server with
        its own version is told it too: its ``weight_version`` becomes ``str(version)``)."""
        if version < self.gate.version:
            raise ValueError(f"policy version {version} is older than {self.gate.version}")
        if self.server is not None:
            self.server.set_weight_version(str(version))
            self.journal.names[str(version)] = version
        self._version(version, str(version) if self.server is not None else None)

    def sync_policy_version(self) -> int:
        """Take the server's ``weight_version`` as it is now (a trainer that set it on the
        server itself); the policy version, unchanged without a server that has one."""
        if self.server is not None:
            name = self.server.weight_version()
            number = self.journal.number(name, self.gate.version)
            if number > self.gate.version:
                self._version(number, name)
        return self.gate.version

    def _version(self, version: int, weight_version: str | None) -> None:
        self.gate.set_version(version)
        self.journal.version(version, weight_version)

    async def pause(self, timeout: float | None = 60.0) -> bool:
        """Hold new upstream requests at the proxies, then wait until the requests already
        upstream ended (none is aborted); False when ``timeout`` (s) ran out first, the
        pause still on. Every agent's next request waits until :meth:`resume`. A server
        with its own pause is then paused too, in ``wait`` mode."""
        idle = await asyncio.to_thread(self.hold, timeout)
        if idle and self.server is not None:
            await asyncio.to_thread(self.server.pause)
        return idle

    def hold(self, timeout: float | None = 60.0) -> bool:
        """:meth:`pause` at the proxies alone, blocking (for a trainer's own thread, such as
        TRL's weight transfer, which pauses the server itself)."""
        self.gate.pause()
        self.journal.pause(self.gate.inflight)
        idle = self.gate.wait_idle(timeout)
        self.journal.idle(self.gate.inflight)
        return idle

    def resume(self) -> None:
        """Let the held requests go upstream (a server with its own version: stamped with
        the version it reports now, after its own resume)."""
        if self.server is not None:
            self.sync_policy_version()
            self.server.resume()
        self.journal.resume(self.gate.held)
        self.gate.resume()

    # -- submitting and taking groups -----------------------------------------------

    async def submit(
        self, tasks: Iterable[str], group_size: int, agent: str | None = None
    ) -> list[int]:
        """Queue one group of ``group_size`` rollouts per task (a task folder's name under
        ``experiments_dir``), run by ``agent`` (the run's first by default); returns the
        group ids. Waits while ``max_groups`` groups are undelivered."""
        if self._executor is None or self._room is None:
            raise ContagentError("the engine is not started (use `async with Engine(...)`)")
        if group_size < 1:
            raise ContagentError("group_size must be 1 or more")
        agent = agent or self.config.run.agents[0]
        if agent not in self.config.run.agents:
            raise ContagentError(f"agent {agent!r} is not one of the run's agents")
        loaded = await asyncio.to_thread(self._load, list(tasks), agent)
        ids = []
        for task in loaded:
            await self._room.acquire()
            if self._stopping:
                self._room.release()
                raise ContagentError("the engine is stopping")
            ids.append(await self._start_group(task, agent, group_size))
        return ids

    def _load(self, names: list[str], agent: str) -> list[Task]:
        run = self.config.run
        new = [n for n in dict.fromkeys(names) if n not in self._tasks]
        if new:
            found, problems = discover_tasks(
                run.experiments_dir, new, run.skills_dir, frozenset(run.task_env)
            )
            if problems:
                raise ContagentError(problems[0].message)
            self._tasks.update((t.name, t) for t in found)
        tasks = [self._tasks[n] for n in names]
        unprepared = [t for t in tasks if (t.name, agent) not in self._prepared]
        if unprepared:
            assert self._executor is not None
            refused = self._executor.prepare([RolloutPlan(t, 0, agent) for t in unprepared])
            if refused:
                raise ContagentError(refused[0].message)
            self._prepared.update((t.name, agent) for t in unprepared)
        return tasks

    async def _start_group(self, task: Task, agent: str, size: int) -> int:
        group = _GroupState(self._next_group, task, agent, size)
        self._next_group += 1
        self._undelivered += 1
        first = self._repeats.get((task.name, agent), 0)
        self._repeats[(task.name, agent)] = first + size
        record, server = self._tokens
        several = len(self.config.run.agents) > 1
        plans = [
            RolloutPlan(task, k, agent, several, tokens=record, server=server)
            for k in range(first, first + size)
        ]
        before = await asyncio.to_thread(self._finished_before, plans)
        for plan in plans:  # started in order: the slots go first come, first served
            job = asyncio.create_task(self._rollout(group, plan, before.get(plan.name)))
            self._running.add(job)
            job.add_done_callback(self._running.discard)
        return group.group_id

    async def groups(self) -> AsyncIterator[Group]:
        """Each group as soon as its last rollout ended, until every group submitted so far
        is delivered (submit more from the loop's body to go on)."""
        while self._undelivered and not self._stopping:
            yield await self.next_group()

    async def next_group(self) -> Group:
        """The next finished group (waits for one), less its samples with no token to train,
        the rest checked against ``max_off_policy_steps`` now, as the trainer takes it."""
        assert self._finished is not None and self._room is not None
        group = await self._finished.get()
        self._undelivered -= 1
        self._room.release()
        current = self.gate.version
        every = [s for o in group.rollouts for s in o.samples]
        useful = [s for s in every if trainable(s)]
        kept, dropped = off_policy_filter(useful, current, self.config.max_off_policy_steps)
        return replace(
            group,
            samples=kept,
            dropped_untrainable=len(every) - len(useful),
            dropped_off_policy=dropped,
            policy_version=current,
        )

    @property
    def pending(self) -> int:
        """Groups submitted and not yet taken."""
        return self._undelivered

    @property
    def ready(self) -> int:
        """Finished groups waiting to be taken."""
        return 0 if self._finished is None else self._finished.qsize()

    # -- one rollout, and its group ---------------------------------------------------

    async def _rollout(
        self, group: _GroupState, plan: RolloutPlan, result: RolloutResult | None
    ) -> None:
        attempts = 0
        try:
            while result is None or (
                result.status == "infra_error"
                and attempts <= self.config.infra_retries
                and not self._stopping
            ):
                result = await self._attempt(plan)
                attempts += 1
        except Exception as exc:  # the group must still be delivered, with this one failed
            log.exception("rollout %s", plan.name)
            self.errors.append(f"{plan.name}: {exc}")
            result = RolloutResult(rollout_id=plan.name, status="infra_error", error=str(exc))
        if self._stopping:
            return
        read = None
        if result.status in FINISHED_STATUSES:  # read now: only formatting waits for the group
            paths, options = self.paths.rollout(plan.name), export_options(self.config.export)
            try:
                read = await asyncio.to_thread(read_finished, paths, options)
            except (ContagentError, OSError):  # the group's build reads it again, says why
                read = None
        group.done[plan.repeat_index] = RolloutOutcome(
            plan.name, result, max(attempts, 1), read=read
        )
        if len(group.done) == group.size:
            await self._deliver(group)

    def _finished_before(self, plans: list[RolloutPlan]) -> dict[str, RolloutResult]:
        """The attempts already finished on disk (``resume``); unfinished ones are moved
        aside, as ``contagent run --resume`` does."""
        _, done = prepare_rollouts(self.paths, plans, self.config.run.resume)
        return {result.rollout_id: result for result in done}

    async def _attempt(self, plan: RolloutPlan) -> RolloutResult:
        assert self._slots is not None
        async with self._slots:
            executor = self._executor
            if executor is None or self._stopping:
                return RolloutResult(rollout_id=plan.name, status="infra_error", error=STOPPED)
            result = await asyncio.wrap_future(executor.submit(plan))
        if result.status == "infra_error" and not self._stopping:
            # the next attempt starts afresh; this one is kept under superseded/
            await asyncio.to_thread(prepare_rollouts, self.paths, [plan], True)
        return result

    async def _deliver(self, state: _GroupState) -> None:
        group = await asyncio.to_thread(self._build, state)
        assert self._finished is not None
        self._finished.put_nowait(group)  # bounded by the room submit takes

    def _build(self, state: _GroupState) -> Group:
        ordered = [state.done[k] for k in sorted(state.done)]
        return build_group(
            state.group_id, state.task.name, state.agent, ordered, self.paths,
            export_options(self.config.export), self.gate.version,
        )  # fmt: skip
