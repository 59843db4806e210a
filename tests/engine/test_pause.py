"""A weight swap behind the engine's pause: the LLM server has no request in flight from
the moment ``pause()`` returns until ``resume()``, across several rollouts' proxies, and
no step of any rollout spans the version change."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from contagent.engine import Engine, EngineConfig, Group
from contagent.rawlog.policy_journal import read_policy_journal
from contagent.testing.inprocess import InProcessExecutor, agent_script
from contagent.testing.llm_stub import LLMStub, Reply, RunningStub, start_stub_in_thread
from tests.engine.test_engine import SAMPLING, export_samples, run_config, step_versions
from tests.helpers import read_rows


class Upstream:
    """The server's own view: requests inside its handler, and when each was."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inflight = 0
        self.spans: list[tuple[float, float]] = []


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RunningStub, Upstream]]:
    seen = Upstream()
    handle = LLMStub._handle

    async def counted(self: LLMStub, request: Any) -> Any:
        with seen.lock:
            seen.inflight += 1
        start = time.monotonic()
        try:
            return await handle(self, request)
        finally:
            with seen.lock:
                seen.inflight -= 1
                seen.spans.append((start, time.monotonic()))

    monkeypatch.setattr(LLMStub, "_handle", counted)

    def slow(req: Any) -> Reply:  # every answer takes a while: requests overlap the pause
        return replace(agent_script(req), delay=0.15)

    running = start_stub_in_thread(slow, models=["m"])
    try:
        yield running, seen
    finally:
        running.stop()


def test_no_request_is_upstream_across_a_version_change(
    tasks: Path, upstream: tuple[RunningStub, Upstream], tmp_path: Path
) -> None:
    stub, seen = upstream
    logs = tmp_path / "logs"
    config = EngineConfig(run=run_config(tasks, logs, stub, jobs=4), export=SAMPLING)
    window: dict[str, float] = {}
    checks: dict[str, Any] = {}

    async def main() -> Group:
        factory = partial(InProcessExecutor, steps=8)
        async with Engine(config, executor=factory) as engine:
            await engine.submit(["a"], group_size=4)
            while len(stub.requests) < 6:  # every rollout is mid-way
                await asyncio.sleep(0.01)
            assert seen.inflight > 0  # requests are upstream as the pause begins
            assert await engine.pause(timeout=30)
            window["paused"] = time.monotonic()
            checks["at_pause"] = seen.inflight
            arrived = len(stub.requests)
            engine.set_policy_version(1)
            for _ in range(3000):  # the agents keep asking: each held at its proxy
                if engine.gate.held == 4:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            checks["held"] = engine.gate.held
            checks["arrived_while_paused"] = len(stub.requests) - arrived
            window["resumed"] = time.monotonic()
            engine.resume()
            return await engine.next_group()

    group = asyncio.run(main())
    assert checks == {"at_pause": 0, "held": 4, "arrived_while_paused": 0}
    overlapping = [(a, b) for a, b in seen.spans if a < window["resumed"] and b > window["paused"]]
    assert overlapping == []  # the server handled nothing from pause() to resume()
    both = 0
    for outcome in group.rollouts:
        versions = step_versions(logs, outcome.rollout_id)
        assert all(start == end for start, end in versions)  # no step spans the change
        assert [v for v, _ in versions] == sorted(v for v, _ in versions)
        both += {v for v, _ in versions} == {0, 1}
    assert both == 4  # each rollout ran on both sides of the swap
    assert all(o.samples and o.no_samples is None for o in group.rollouts)  # none failed closed
    events = read_policy_journal(logs)
    assert events is not None
    assert [(e.event, e.version, e.held) for e in events] == [
        ("version", 0, None), ("pause", None, None), ("idle", None, None),
        ("version", 1, None), ("resume", None, 4),
    ]  # fmt: skip
    assert events[1].in_flight and events[1].in_flight > 0 and events[2].in_flight == 0


def test_an_exchange_running_across_a_swap_without_a_pause_fails_closed(
    tasks: Path, tmp_path: Path
) -> None:
    """The trainer swaps while a step is upstream (no pause): the step's request went up
    under 0 and it ended under 1, so which weights sampled it is unknown, and its rollout
    gives no samples, with the kind and the step named."""
    engines: list[Engine] = []

    def swap_mid_step(req: Any) -> Reply:
        messages = req.json.get("messages", []) if isinstance(req.json, dict) else []
        if engines and len(messages) == 1 and engines[0].policy_version == 0:
            engines[0].set_policy_version(1)  # this request is upstream now
        return agent_script(req)

    stub = start_stub_in_thread(swap_mid_step, models=["m"])
    logs = tmp_path / "logs"
    config = EngineConfig(run=run_config(tasks, logs, stub, jobs=1), export=SAMPLING)

    async def main() -> Group:
        async with Engine(config, executor=partial(InProcessExecutor, steps=2)) as engine:
            engines.append(engine)
            await engine.submit(["a"], group_size=1)
            return await engine.next_group()

    try:
        group = asyncio.run(main())
    finally:
        stub.stop()
    (outcome,) = group.rollouts
    assert step_versions(logs, "a") == [(0, 1), (1, 1)]
    assert outcome.samples == [] and group.samples == []
    assert outcome.no_samples is not None and "bad_tokens" in outcome.no_samples
    exported = export_samples(logs, tmp_path / "out")  # the export judges it the same way
    assert exported == {}
    (row,) = read_rows(tmp_path / "out" / "results.jsonl")
    assert row["tokens"]["kinds"] == ["bad_tokens"]
    assert row["tokens"]["reason"].startswith("step 0: ran across a policy update (0 -> 1)")
