"""TRL's ``AsyncGRPOTrainer`` fed by contagent: its ``RolloutWorkerProtocol`` over an engine.

``AsyncGRPOTrainer(..., rollout_worker=ContagentRolloutWorker(...))`` takes its
``RolloutSample``s from contagent groups instead of TRL's own generation loop:
each sample of a delivered group becomes one ``RolloutSample`` whose ``input_ids`` and
``completion_mask`` are the sample's ``token_ids`` and ``mask``, ``old_log_probs`` the
sampler's ``logprobs`` (0 off the mask, as TRL zero-fills context), ``advantage`` the
rollout's scalar and ``group_id`` the engine's group id.

Versions: TRL counts weight syncs in an int ``model_version`` and calls
``update_model_version`` after each one; the worker makes that int the engine's policy
version (:meth:`~contagent.engine.Engine.set_policy_version`), so the versions the proxies
stamp are TRL's own, and a sample's ``model_version`` is the oldest version among its
sampled tokens (the one TRL's staleness check must see). Wrapping the trainer's weight
transfer with :meth:`ContagentRolloutWorker.gated` holds the proxies from its ``pause()``
until the new version is set, so no request goes upstream between a weight swap and its
version. With a vLLM server that keeps its own ``weight_version`` see docs/engine.md.

TRL divides the logits by one ``temperature``: a sample with a sampled token at another
temperature is dropped and counted (``contagent/dropped_temperature_total``); run the
agents with ``--sampling-override temperature=T`` to match. ``trl`` is imported only
when the worker starts: it is no dependency of contagent.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from contagent.engine.engine import Engine, ExecutorFactory
from contagent.engine.engine_config import EngineConfig
from contagent.engine.group_build import Group, oldest_version
from contagent.errors import ContagentError

log = logging.getLogger(__name__)

#: How long a blocked put into the trainer's buffer waits before looking at ``stop`` again (s).
_PUT_POLL_S = 0.2
#: Two temperatures closer than this are the same (the tokens format stores float32).
_TEMPERATURE_TOLERANCE = 1e-5


def _rollout_sample_class() -> Any:
    try:
        from trl.experimental.async_grpo.async_rollout_worker import RolloutSample
    except ImportError as exc:
        raise ContagentError(
            f"the TRL rollout worker needs trl 1.16 or newer ({exc}): pip install 'trl>=1.16'"
        ) from None
    return RolloutSample


class ContagentRolloutWorker:
    """TRL 1.16's ``RolloutWorkerProtocol`` over a contagent :class:`~contagent.engine.Engine`.

    ``tasks`` is iterated lazily, one group of ``group_size`` rollouts per name
    (``itertools.cycle(names)`` keeps it going); ``temperature`` is the trainer's;
    ``decode`` (a tokenizer's ``decode``) fills ``prompt`` and ``completion``, else they
    are empty. The engine runs on its own event loop in a thread of this process.
    """

    def __init__(
        self,
        config: EngineConfig,
        tasks: Iterable[str],
        group_size: int,
        *,
        temperature: float = 1.0,
        agent: str | None = None,
        executor: ExecutorFactory | None = None,
        decode: Callable[[list[int]], str] | None = None,
        buffer_size: int = 1024,
        start_timeout_s: float = 600.0,
    ) -> None:
        if group_size < 1:
            raise ContagentError("group_size must be 1 or more")
        self.rollout_buffer: queue.Queue[Any] = queue.Queue(maxsize=buffer_size)
        self.metrics_queue: queue.Queue[dict[str, float]] = queue.Queue(maxsize=4096)
        self.engine = Engine(config, executor=executor)
        self.temperature = temperature
        self._tasks: Iterator[str] = iter(tasks)
        self._group_size = group_size
        self._agent = agent
        self._decode = decode
        self._start_timeout_s = start_timeout_s
        self._sample_class: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._exhausted = False
        self._last_group = time.monotonic()
        self._release_on_version = False

    # -- RolloutWorkerProtocol ------------------------------------------------------

    def start(self) -> None:
        """Start the engine (its executor, the LLM server check) and begin submitting;
        raises when the engine cannot start."""
        if self._thread is not None:
            raise ContagentError("the rollout worker is already started")
        self._sample_class = _rollout_sample_class()
        self._thread = threading.Thread(target=self._run, name="contagent-rollouts", daemon=True)
        self._thread.start()
        if not self._ready.wait(self._start_timeout_s):
            self.stop()
            raise ContagentError(f"the engine did not start in {self._start_timeout_s:g} s")
        if self._error is not None:
            self._thread.join()
            raise ContagentError(f"the engine did not start: {self._error}")
        self._last_group = time.monotonic()

    def stop(self) -> None:
        """Stop the engine as Ctrl-C stops a run (nothing left in Docker, the log dir
        resumable) and wait for it."""
        self._stopped.set()
        loop, main = self._loop, self._main
        if loop is not None and main is not None:
            try:
                loop.call_soon_threadsafe(main.cancel)
            except RuntimeError:  # its loop already ended
                pass
        if self._thread is not None:
            self._thread.join()

    def update_model_version(self, model_version: int) -> None:
        """TRL's new version is live: exchanges from now on are stamped with it (and the
        proxies' hold taken by :meth:`gated`'s pause ends)."""
        self.engine.set_policy_version(int(model_version))
        if self._release_on_version:
            self._release_on_version = False
            self.engine.resume()

    def check_health(self, stale_after_s: float) -> None:
        """Raise when the engine failed, stopped, ran out of tasks, or delivered no group
        in ``stale_after_s`` seconds."""
        if self._error is not None:
            raise RuntimeError(f"contagent rollout worker failed: {self._error}") from self._error
        if self._thread is None or not self._thread.is_alive():
            why = "ran out of tasks" if self._exhausted else "is not running"
            raise RuntimeError(f"contagent rollout worker {why}")
        quiet = time.monotonic() - self._last_group
        if quiet > stale_after_s:
            raise RuntimeError(f"contagent rollout worker delivered no group in {quiet:.0f} s")

    # -- weight swaps with nothing in flight ----------------------------------------

    def gated(self, transfer: Any, pause_timeout_s: float = 600.0) -> GatedTransfer:
        """``transfer`` (TRL's ``WeightTransferProtocol``) with the proxies' hold around it."""
        return GatedTransfer(self, transfer, pause_timeout_s)

    def hold_until_version(self) -> None:
        """Keep the proxies' hold until the next :meth:`update_model_version`."""
        self._release_on_version = True

    # -- the engine's thread --------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by check_health and start
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("contagent rollout worker")
                self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        if self._stopped.is_set():
            return
        async with self.engine:
            self._ready.set()
            feeder = asyncio.create_task(self._feed())
            try:
                await self._drain(feeder)
            finally:
                feeder.cancel()
        if not feeder.cancelled() and feeder.exception() is not None:
            raise feeder.exception()  # type: ignore[misc]

    async def _feed(self) -> None:
        for task in self._tasks:
            await self.engine.submit([task], self._group_size, self._agent)
        self._exhausted = True

    async def _drain(self, feeder: asyncio.Task[None]) -> None:
        while not (feeder.done() and self.engine.pending == 0):
            taking = asyncio.ensure_future(self.engine.next_group())
            # once the tasks ran out, only the groups still pending are waited for
            waited = {taking} if feeder.done() else {taking, feeder}
            await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            if not taking.done():
                taking.cancel()
                if feeder.exception() is not None:
                    return
                continue
            group = taking.result()
            self._last_group = time.monotonic()
            samples, metrics = self.convert(group)
            self._put_metrics(metrics)
            for sample in samples:
                await asyncio.to_thread(self._put, sample)

    def _put(self, sample: Any) -> None:
        sample.enqueued_at = time.time()
        while not self._stopped.is_set():
            try:
                self.rollout_buffer.put(sample, timeout=_PUT_POLL_S)
                return
            except queue.Full:
                continue

    def _put_metrics(self, metrics: dict[str, float]) -> None:
        try:
            self.metrics_queue.put_nowait(metrics)
        except queue.Full:  # a trainer that never logs: its oldest numbers are not kept
            pass

    # -- groups to RolloutSamples ---------------------------------------------------

    def convert(self, group: Group) -> tuple[list[Any], dict[str, float]]:
        """A delivered group's ``RolloutSample``s, and the metrics of its delivery."""
        import numpy as np

        rewards = [r for r in group.rewards if r is not None]
        mean = sum(rewards) / len(rewards) if rewards else math.nan
        std = (
            math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else math.nan
        )
        samples, hot, unversioned = [], 0, 0
        for row in group.samples:
            version = oldest_version(row)
            if version is None:
                unversioned += 1
                continue
            if not self._at_temperature(row):
                hot += 1
                continue
            ids, mask = row["token_ids"], row["mask"]
            first = next((i for i, m in enumerate(mask) if m), len(ids))
            reward = row["reward"]
            samples.append(
                self._sample_class(
                    prompt=self._messages("user", ids[:first]),
                    completion=self._messages("assistant", ids[first:]),
                    input_ids=np.asarray(ids, dtype=np.int64),
                    completion_mask=np.asarray(mask, dtype=np.int64),
                    old_log_probs=np.asarray(row["logprobs"], dtype=np.float32),
                    advantage=float(row["advantage"]),
                    model_version=version,
                    group_id=group.group_id,
                    metrics={
                        "reward": math.nan if reward is None else float(reward),
                        "reward_std": std,
                    },
                )
            )
        metrics = {
            "contagent/groups_total": 1.0,
            "contagent/samples_total": float(len(samples)),
            "contagent/dropped_temperature_total": float(hot),
            "contagent/dropped_unversioned_total": float(unversioned),
            "contagent/dropped_untrainable_total": float(group.dropped_untrainable),
            "contagent/dropped_off_policy_total": float(group.dropped_off_policy),
            "contagent/failed_rollouts_total": float(len(group.failed)),
            "contagent/group_reward_mean": mean,
        }
        return samples, metrics

    def _at_temperature(self, row: dict[str, Any]) -> bool:
        return all(
            abs(t - self.temperature) <= _TEMPERATURE_TOLERANCE
            for t, m in zip(row["temperatures"], row["mask"], strict=True)
            if m
        )

    def _messages(self, role: str, ids: list[int]) -> list[dict[str, str]]:
        return [] if self._decode is None else [{"role": role, "content": self._decode(ids)}]


class GatedTransfer:
    """TRL's ``WeightTransferProtocol`` around another one: ``pause()`` first holds the
    contagent proxies and waits until no request is upstream, and the hold lasts past
    ``resume()`` until the trainer's ``update_model_version``, so every request sent after
    the swap carries the new version."""

    def __init__(self, worker: ContagentRolloutWorker, inner: Any, timeout_s: float) -> None:
        self._worker = worker
        self._inner = inner
        self._timeout_s = timeout_s

    def init_weight_transfer(self) -> None:
        self._inner.init_weight_transfer()

    def pause(self) -> None:
        if not self._worker.engine.hold(self._timeout_s):
            log.warning("requests still upstream after %g s; swapping anyway", self._timeout_s)
        self._inner.pause()

    def send_weights(self, iterator: Iterable[tuple[str, Any]]) -> None:
        self._inner.send_weights(iterator)

    def resume(self) -> None:
        self._inner.resume()
        self._worker.hold_until_version()

    def destroy(self) -> None:
        self._inner.destroy()
