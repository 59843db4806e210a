"""The rollout engine on the in-process executor stand-in: real proxies, the scripted stub,
the export's own code; groups, retries, versions, the off-policy bound, backpressure, stop."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from contagent.engine import Engine, EngineConfig, Group
from contagent.errors import ContagentError
from contagent.export.exporter import ExportOptions, export
from contagent.rawlog.read import read_exchanges
from contagent.runner.config import LlmOptions, RunConfig
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.testing.inprocess import InProcessExecutor
from contagent.testing.llm_stub import RunningStub
from contagent.validate.check import validate

#: the stub's logprobs mode is not probed: its samples are taken as the sampler's
SAMPLING = ExportOptions(allow_raw_logprobs=True)


def run_config(tasks: Path, logs: Path, stub: RunningStub, **kw: Any) -> RunConfig:
    return RunConfig(
        experiments_dir=tasks,
        log_dir=logs,
        upstream_url=stub.url,
        llm=LlmOptions("m", temperature=1.0),
        wait_for_llm_s=5,
        **{"jobs": 4, **kw},
    )


def reward_by_repeat(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
    """Rewards 1, 0, 0.5, 0 by repeat; b's third rollout fails its first attempt."""
    if plan.experiment.name == "b" and plan.repeat_index == 2 and attempt == 1:
        return "infra_error", None
    reward = (1.0, 0.0, 0.5, 0.0)[plan.repeat_index % 4]
    return ("passed" if reward == 1.0 else "failed"), reward


def export_samples(logs: Path, out: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    export([logs / "rollouts"], out, replace(SAMPLING, formats=("tokens",), filter="all"))
    assert validate(out / "results.jsonl").ok
    rows = pq.read_table(out / "tokens" / "data").to_pylist()
    return {(r["rollout_id"], r["branch"], r["sample"]): r for r in rows}


def step_versions(logs: Path, rollout_id: str) -> list[tuple[int, int]]:
    raw = read_exchanges(logs / "rollouts" / rollout_id / "exchanges.jsonl.zst")
    return [
        (raw.requests[i]["policy_version"], raw.outcomes[i]["policy_version"])
        for i in sorted(raw.requests)
    ]


def test_groups_arrive_complete_with_versions_retries_and_the_export_s_samples(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    config = EngineConfig(
        run=run_config(tasks, logs, stub), max_off_policy_steps=0, export=SAMPLING
    )
    swapped = threading.Event()

    def verdict(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
        if plan.experiment.name == "c":  # c's rollouts start after the new weights
            swapped.wait(30)
        return reward_by_repeat(plan, attempt)

    factory = partial(InProcessExecutor, steps=3, verdict=verdict, step_delay=0.05)
    got: list[Group] = []

    async def main() -> None:
        async with Engine(config, executor=factory) as engine:
            assert await engine.submit(["a", "b", "c"], group_size=4) == [0, 1, 2]
            while not engine.ready:  # a's group is done; b's rollouts took its slots
                await asyncio.sleep(0.01)
            assert await engine.pause(timeout=30)  # new weights, swapped with nothing in flight
            engine.set_policy_version(1)
            engine.resume()
            swapped.set()
            async for group in engine.groups():
                got.append(group)

    asyncio.run(main())
    assert sorted(g.task for g in got) == ["a", "b", "c"]
    first = got[0]
    for group in got:
        assert group.complete and len(group.rollouts) == 4
        assert [o.reward for o in group.rollouts] == [1.0, 0.0, 0.5, 0.0]
        retried = {o.rollout_id: o.attempts for o in group.rollouts if o.attempts > 1}
        assert retried == ({"b_r2": 2} if group.task == "b" else {})
        for outcome in group.rollouts:
            versions = step_versions(logs, outcome.rollout_id)
            (sample,) = outcome.samples  # the stub keeps the prefix: one sample a rollout
            assert set(sample["policy_versions"]) == {v for v, _ in versions}
            assert all(a == b for a, b in versions)  # a step across the swap gives no sample
            advantage = outcome.reward - 0.375  # GRPO: the reward less the group's mean
            assert {a for a, m in zip(sample["advantages"], sample["mask"], strict=True) if m} == {
                advantage
            }
        every = [s for o in group.rollouts for s in o.samples]
        stale = [s for s in every if min(s["policy_versions"]) < group.policy_version]
        assert group.dropped_off_policy == len(stale)
        assert len(group.samples) == len(every) - len(stale)
    assert first.task == "a" and first.dropped_off_policy == 4 and first.samples == []
    (last,) = [g for g in got if g.task == "c"]  # its rollouts started after the swap
    assert len(last.samples) == 4 and last.dropped_off_policy == 0
    assert all(g.policy_version == 1 for g in got)
    assert (logs / "superseded").is_dir()  # b_r2's failed attempt, kept aside

    exported = export_samples(logs, tmp_path / "out")
    engine_samples = {
        (s["rollout_id"], s["branch"], s["sample"]): s
        for g in got
        for o in g.rollouts
        for s in o.samples
    }
    assert engine_samples.keys() == exported.keys()
    for key, sample in engine_samples.items():
        assert sample == exported[key]


def test_a_rollout_still_failing_after_the_retries_is_reported_not_dropped(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    def b0_fails(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
        return ("infra_error", None) if plan.repeat_index == 0 else ("passed", 1.0)

    config = EngineConfig(
        run=run_config(tasks, tmp_path / "logs", stub), infra_retries=1, export=SAMPLING
    )

    async def main() -> Group:
        factory = partial(InProcessExecutor, steps=2, verdict=b0_fails)
        async with Engine(config, executor=factory) as engine:
            await engine.submit(["a"], group_size=3)
            return await engine.next_group()

    group = asyncio.run(main())
    assert not group.complete
    assert [(o.rollout_id, o.attempts) for o in group.failed] == [("a", 2)]
    assert [o.rollout_id for o in group.rollouts] == ["a_r1", "a_r2"]
    # the advantages are over the rollouts that have a verdict
    assert all(set(s["advantages"]) == {0.0} for s in group.samples)


def test_submit_waits_while_max_groups_are_undelivered(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    config = EngineConfig(
        run=run_config(tasks, tmp_path / "logs", stub), max_groups=1, export=SAMPLING
    )

    async def main() -> None:
        async with Engine(config, executor=partial(InProcessExecutor, steps=1)) as engine:
            await engine.submit(["a"], group_size=1)
            second = asyncio.create_task(engine.submit(["b"], group_size=1))
            await asyncio.sleep(0.5)
            assert not second.done()  # group a is not taken yet
            assert (await engine.next_group()).task == "a"
            assert await asyncio.wait_for(second, 10) == [1]
            assert (await engine.next_group()).task == "b"

    asyncio.run(main())


def test_stopping_leaves_the_log_dir_to_resume(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    slow = partial(InProcessExecutor, steps=50, step_delay=0.05)

    async def stopped() -> None:
        config = EngineConfig(run=run_config(tasks, logs, stub, jobs=2), export=SAMPLING)
        async with Engine(config, executor=slow) as engine:
            await engine.submit(["a"], group_size=2)
            await asyncio.sleep(1.0)

    asyncio.run(stopped())
    results = sorted(p.parent.name for p in (logs / "rollouts").glob("*/result.json"))
    assert results == ["a", "a_r1"]
    for rollout in ("a", "a_r1"):
        text = (logs / "rollouts" / rollout / "result.json").read_text()
        assert '"infra_error"' in text and "engine stopped" in text

    async def resumed() -> Group:
        config = EngineConfig(run=run_config(tasks, logs, stub, resume=True), export=SAMPLING)
        async with Engine(config, executor=partial(InProcessExecutor, steps=2)) as engine:
            await engine.submit(["a"], group_size=2)
            return await engine.next_group()

    group = asyncio.run(resumed())
    assert group.complete and [o.rollout_id for o in group.rollouts] == ["a", "a_r1"]
    assert len(list((logs / "superseded").iterdir())) == 2  # the stopped attempts


def test_bad_submissions_say_why(tasks: Path, stub: RunningStub, tmp_path: Path) -> None:
    config = EngineConfig(run=run_config(tasks, tmp_path / "logs", stub), export=SAMPLING)

    async def main() -> None:
        engine = Engine(config, executor=InProcessExecutor)
        with pytest.raises(ContagentError, match="not started"):
            await engine.submit(["a"], group_size=1)
        async with engine:
            with pytest.raises(ContagentError, match="group_size"):
                await engine.submit(["a"], group_size=0)
            with pytest.raises(ContagentError, match="nope"):
                await engine.submit(["nope"], group_size=1)
            with pytest.raises(ContagentError, match="agent 'codex'"):
                await engine.submit(["a"], group_size=1, agent="codex")

    asyncio.run(main())


def test_a_sample_with_no_token_to_train_is_counted_not_delivered(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    """Every step under ``tool_choice: required``: all each rollout sampled is constrained,
    off the mask, so its sample has nothing to train though its advantage is not 0."""

    def half(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
        return ("passed", 1.0) if plan.repeat_index == 0 else ("failed", 0.0)

    factory = partial(
        InProcessExecutor, steps=2, verdict=half, extra_body={"tool_choice": "required"}
    )

    async def main(export: ExportOptions, logs: Path) -> Group:
        run = run_config(tasks, logs, stub)
        config = EngineConfig(run=run, export=export, max_off_policy_steps=0)
        async with Engine(config, executor=factory) as engine:
            await engine.submit(["a"], group_size=2)
            return await engine.next_group()

    group = asyncio.run(main(SAMPLING, tmp_path / "logs"))
    made = [s for o in group.rollouts for s in o.samples]  # the export's rows
    assert len(made) == 2 and {s["advantage"] for s in made} == {0.5, -0.5}
    assert all(any(s["constrained"]) and not any(s["mask"]) for s in made)
    assert group.samples == [] and group.dropped_untrainable == 2
    assert group.dropped_off_policy == 0  # not taken for samples whose version is unknown
    kept = asyncio.run(main(replace(SAMPLING, train_constrained=True), tmp_path / "kept"))
    assert len(kept.samples) == 2 and kept.dropped_untrainable == 0


class _SlowClose(InProcessExecutor):
    """Its close waits for the test's word: a stop is cancelled while it closes."""

    release = threading.Event()
    closed = threading.Event()

    def close(self) -> None:
        self.release.wait(30)
        super().close()
        self.closed.set()


def test_a_cancelled_stop_still_closes_the_executor_before_it_ends(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    """A task cancelled in the engine's stop (a worker cancelling its loop, a second
    Ctrl-C) ends only once the executor closed: its rollouts cleaned up, their logs
    compacted, nothing left running."""
    config = EngineConfig(run=run_config(tasks, tmp_path / "logs", stub), export=SAMPLING)
    _SlowClose.release.clear()
    _SlowClose.closed.clear()

    async def main() -> None:
        engine = Engine(config, executor=_SlowClose)
        await engine.start()
        stopping = asyncio.create_task(engine.stop())
        await asyncio.sleep(0)  # it runs up to its wait for the close
        stopping.cancel()
        for _ in range(3):  # the cancel is taken in the loop's next step
            await asyncio.sleep(0)
        assert not stopping.done()  # still waiting for the close
        _SlowClose.release.set()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        assert _SlowClose.closed.is_set()

    asyncio.run(main())
