"""Ways to run the recording proxy: in a background thread, or in the foreground until a signal."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contagent._loopthread import InThread, new_event_loop
from contagent.proxy.late_plan import LatePlan
from contagent.proxy.proxy_options import ProxyOptions
from contagent.proxy.reward_route import RewardRoute
from contagent.proxy.server import RecordingProxy


class RunningProxy(InThread[RecordingProxy]):
    """Handle on a :class:`RecordingProxy` served from a background thread.

    ``url`` and ``rollout_base_url(id)`` as on the proxy; ``stop()`` finishes the
    records of in-flight requests and ends the thread. Usable as a context manager.
    """

    stop_timeout = None  # the proxy bounds its own stop (stop_grace)

    @property
    def proxy(self) -> RecordingProxy:
        return self.service

    @property
    def url(self) -> str:
        return self.service.url

    @property
    def record_dir(self) -> Path:
        return self.service.record_dir

    def rollout_base_url(self, rollout_id: str) -> str:
        return self.service.rollout_base_url(rollout_id)


def start_proxy_in_thread(
    upstream: str, record_dir: Path, options: ProxyOptions | None = None, **given: Any
) -> RunningProxy:
    """Start a recording proxy on its own event loop thread; returns once it listens.

    Raises :class:`~contagent.errors.ContagentError` when it cannot listen.
    """
    return RunningProxy(RecordingProxy(upstream, record_dir, options, **given), "contagent-proxy")


@dataclass(frozen=True)
class ProxyRunSummary:
    """What a foreground proxy did before it was stopped."""

    url: str
    record_dir: Path
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def exchanges(self) -> int:
        return sum(self.outcomes.values())


def run_proxy(
    upstream: str,
    record_dir: Path,
    *,
    on_ready: Callable[[str], None] | None = None,
    tokens_mode: str | None = None,
    on_tokens: Callable[[str], None] | None = None,
    reward: RewardRoute | None = None,
    options: ProxyOptions | None = None,
    **given: Any,
) -> ProxyRunSummary:
    """Serve in the foreground until SIGINT or SIGTERM, then stop cleanly.

    ``on_ready(url)`` is called once the proxy listens. ``tokens_mode`` (``--tokens``)
    is resolved against the upstream before the proxy listens; ``on_tokens`` gets the
    lines that say what was decided once it does. ``auto`` with an upstream that does not
    answer yet decides again at the first contact (:mod:`contagent.proxy.late_plan`) and
    says so then. ``reward`` (the control route) starts before the proxy listens and
    stops after it.
    """
    proxy = RecordingProxy(upstream, record_dir, options, **given)
    plan = proxy.plan_tokens(tokens_mode) if tokens_mode is not None else None
    if plan is not None and plan.unanswered and tokens_mode == "auto":
        proxy.late = LatePlan(lambda: proxy.check_tokens("auto"), proxy.apply_plan, on_tokens)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if reward is not None:
            await reward.start()
        try:
            await proxy.start()
        except BaseException:
            if reward is not None:
                await reward.stop()
            raise
        try:
            if plan is not None and on_tokens is not None:
                later = " until the first contact" if proxy.late is not None else ""
                for line in (plan.line + later, *plan.details):
                    on_tokens(line)
            if on_ready is not None:
                on_ready(proxy.url)
            await stop.wait()
        finally:
            await proxy.stop()
            if reward is not None:
                await reward.stop()

    _tune_gc()
    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return ProxyRunSummary(proxy.url, proxy.record_dir, dict(proxy.counts))


#: gen0 every 5k container allocations instead of 700 (several requests, not one),
#: a full collection every 1M. Larger gen0 batches saved little more CPU and made
#: the pauses long enough to show in time to first chunk.
_GC_THRESHOLDS = (5_000, 20, 10)


def _tune_gc() -> None:
    """Cheaper cyclic GC for a process that only proxies (the foreground command).

    Each exchange allocates thousands of short-lived containers, so the default
    thresholds run a collection every request or two, and the occasional full one
    walks everything imported at startup: a measured ~10% of the proxy's CPU and
    its p99 spikes. Startup objects are frozen out of collections; cycles are still
    collected, just in larger batches. Not done for the in-thread proxy, whose
    process belongs to the caller.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
