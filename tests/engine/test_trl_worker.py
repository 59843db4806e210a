"""The TRL rollout worker without TRL: its samples, versions, temperature rule and health.

TRL's own data path reads the same worker in tests/trainers/test_trl_async_grpo.py; here
its ``RolloutSample`` is a stand-in with TRL 1.16's fields, so the fast tier checks the
mapping from groups to samples.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from contagent.engine import EngineConfig, Group, trl_worker
from contagent.engine.trl_worker import ContagentRolloutWorker
from contagent.errors import ContagentError
from contagent.layout import RolloutPaths
from contagent.rawlog.read import read_exchanges
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.testing.inprocess import InProcessExecutor
from contagent.testing.llm_stub import RunningStub
from tests.engine.test_engine import SAMPLING, run_config


@dataclass
class FakeRolloutSample:
    """TRL 1.16's ``RolloutSample`` fields."""

    prompt: Any
    completion: Any
    input_ids: Any
    completion_mask: Any
    old_log_probs: Any
    advantage: float
    model_version: int
    group_id: int
    metrics: dict[str, float]
    enqueued_at: float | None = None


@pytest.fixture(autouse=True)
def fake_trl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trl_worker, "_rollout_sample_class", lambda: FakeRolloutSample)


def rewards(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
    return ("passed", 1.0) if plan.repeat_index % 2 == 0 else ("failed", 0.0)


def take(worker: ContagentRolloutWorker, n: int) -> list[FakeRolloutSample]:
    out = []
    while len(out) < n:
        try:
            out.append(worker.rollout_buffer.get(timeout=0.2))
        except queue.Empty:
            worker.check_health(60)
    return out


def worker_for(
    tasks: Path, stub: RunningStub, logs: Path, temperature: float = 1.0, **kw: Any
) -> ContagentRolloutWorker:
    config = EngineConfig(run=run_config(tasks, logs, stub, jobs=2), export=SAMPLING)
    return ContagentRolloutWorker(
        config, kw.pop("names", ["a", "b"]), group_size=2, temperature=temperature,
        executor=partial(InProcessExecutor, steps=3, verdict=rewards), **kw,
    )  # fmt: skip


def test_samples_are_the_group_s_tokens_with_trl_s_versions(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    worker = worker_for(tasks, stub, logs, names=["a"], decode=lambda ids: f"<{len(ids)}>")
    worker.start()
    try:
        first = take(worker, 2)
        worker.update_model_version(4)  # TRL's int becomes the engine's version
        assert worker.engine.policy_version == 4
    finally:
        worker.stop()
    with pytest.raises(RuntimeError, match="ran out of tasks"):
        worker.check_health(60)
    assert {s.group_id for s in first} == {0} and {s.model_version for s in first} == {0}
    assert sorted(s.advantage for s in first) == [-0.5, 0.5]
    for sample in first:
        rollout = "a" if sample.advantage > 0 else "a_r1"
        # the log in whichever form it is in: the samples' tokens are the subject here
        raw = read_exchanges(RolloutPaths(logs / "rollouts" / rollout).raw_log)
        last = raw.outcomes[max(raw.outcomes)]
        ids = sample.input_ids.tolist()
        mask = sample.completion_mask.tolist()
        answer = last["tokens"]["choices"][0]
        assert ids[-len(answer["token_ids"]) :] == answer["token_ids"]  # its last answer's
        assert sample.old_log_probs.tolist()[-1] == pytest.approx(answer["logprobs"][-1])
        assert sample.input_ids.dtype.name == "int64" and set(mask) == {0, 1}
        lps = sample.old_log_probs.tolist()
        assert all(lp == 0 for lp, m in zip(lps, mask, strict=True) if not m)
        assert all(lp < 0 for lp, m in zip(lps, mask, strict=True) if m)
        assert sample.metrics == {"reward": 1.0 if rollout == "a" else 0.0, "reward_std": 0.5}
        first_own = mask.index(1)
        assert sample.prompt == [{"role": "user", "content": f"<{first_own}>"}]
        assert sample.completion == [{"role": "assistant", "content": f"<{len(ids) - first_own}>"}]
    metrics = worker.metrics_queue.get_nowait()
    assert metrics["contagent/samples_total"] == 2 and metrics["contagent/groups_total"] == 1


def test_samples_at_another_temperature_are_dropped_and_counted(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    worker = worker_for(tasks, stub, tmp_path / "logs", temperature=0.7, names=["a"])
    worker.start()
    try:
        metrics = worker.metrics_queue.get(timeout=60)
    finally:
        worker.stop()
    assert metrics["contagent/dropped_temperature_total"] == 2
    assert metrics["contagent/samples_total"] == 0 and worker.rollout_buffer.empty()


def test_a_gated_swap_holds_the_proxies_until_the_new_version(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    worker = worker_for(tasks, stub, tmp_path / "logs", names=[])
    calls: list[str] = []

    class Inner:
        def pause(self) -> None:
            calls.append(f"pause held={worker.engine.gate.paused}")

        def resume(self) -> None:
            calls.append("resume")

    gated = worker.gated(Inner())
    gated.pause()
    gated.resume()
    assert worker.engine.gate.paused  # still held: the new version is not set yet
    worker.update_model_version(1)
    assert not worker.engine.gate.paused and worker.engine.policy_version == 1
    assert calls == ["pause held=True", "resume"]
    worker.update_model_version(2)  # a version without a gated swap takes no hold
    assert not worker.engine.gate.paused


def test_a_worker_whose_engine_cannot_start_says_why(
    tmp_path: Path, tasks: Path, stub: RunningStub
) -> None:
    run = replace(run_config(tasks, tmp_path / "logs", stub), upstream_url="http://127.0.0.1:9")
    config = EngineConfig(run=replace(run, wait_for_llm_s=0))
    worker = ContagentRolloutWorker(config, ["a"], group_size=1)
    with pytest.raises(ContagentError, match="the engine did not start"):
        worker.start()
    with pytest.raises(RuntimeError, match="failed"):
        worker.check_health(60)


def test_samples_with_nothing_to_train_are_counted_in_the_metrics(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    worker = worker_for(tasks, stub, tmp_path / "logs", names=[])
    group = Group(
        group_id=0, task="a", agent="mini-swe-agent", rollouts=[], failed=[], samples=[],
        dropped_untrainable=3, dropped_off_policy=1, policy_version=0, finished_at=0.0,
    )  # fmt: skip
    samples, metrics = worker.convert(group)
    assert samples == []
    assert metrics["contagent/dropped_untrainable_total"] == 3
    assert metrics["contagent/dropped_off_policy_total"] == 1
