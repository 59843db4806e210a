"""``contagent run --stream-samples``: ``run_experiments`` on the in-process executor
stand-in, each finished group a JSON line naming its shard, a pipe holding the run back."""

from __future__ import annotations

import os
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from contagent.engine.sample_stream import SampleStream
from contagent.runner import run as run_module
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.runner.summary import RunSummary
from contagent.testing.inprocess import InProcessExecutor
from contagent.testing.llm_stub import RunningStub
from tests.engine.test_engine import SAMPLING, export_samples, run_config


def _by_repeat(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
    if plan.experiment.name == "b" and plan.repeat_index == 1:
        return "infra_error", None  # a run does not retry: the group says it is short
    return ("passed", 1.0) if plan.repeat_index == 0 else ("failed", 0.0)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    factory = partial(InProcessExecutor, steps=2, verdict=_by_repeat)
    monkeypatch.setattr(run_module, "open_executor", factory)
    monkeypatch.setattr(run_module, "_sweep", lambda config, emit: None)
    monkeypatch.setattr(run_module.leftovers, "left_by_run", lambda run_id: [])


def _run(tasks: Path, logs: Path, stub: RunningStub, out: Path, **kw: Any) -> RunSummary:
    config = run_config(tasks, logs, stub, repeat=2, experiments=("a", "b"), **kw)
    stream = SampleStream(out, logs, config.repeat, SAMPLING)
    try:
        return run_module.run_experiments(config, stream.on_event)
    finally:
        stream.close()


@pytest.mark.usefixtures("in_process")
def test_each_group_is_one_line_naming_a_shard_of_the_export_s_samples(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    logs, out = tmp_path / "logs", tmp_path / "groups.jsonl"
    out.write_bytes(b'{"earlier": true}\n')  # appended to, never truncated
    summary = _run(tasks, logs, stub, out, jobs=2)
    assert len(summary.results) == 4
    earlier, *lines = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert earlier == {"earlier": True}
    by_task = {line["task"]: line for line in lines}
    assert sorted(by_task) == ["a", "b"]
    a, b = by_task["a"], by_task["b"]
    assert a["complete"] and a["rollouts"] == ["a", "a_r1"] and a["rewards"] == [1.0, 0.0]
    assert not b["complete"] and [f["rollout_id"] for f in b["failed"]] == ["b_r1"]
    assert b["rollouts"] == ["b"] and b["rewards"] == [1.0]
    exported = export_samples(logs, tmp_path / "out")
    for line in lines:
        shard = Path(line["shard"])
        assert shard.parent == logs / "stream"
        rows = pq.read_table(shard).to_pylist()
        assert len(rows) == line["samples"] > 0
        for row in rows:
            assert row == exported[(row["rollout_id"], row["branch"], row["sample"])]
    (a0,) = [r for r in pq.read_table(Path(a["shard"])).to_pylist() if r["rollout_id"] == "a"]
    assert {x for x, m in zip(a0["advantages"], a0["mask"], strict=True) if m} == {0.5}


@pytest.mark.usefixtures("in_process")
def test_a_pipe_with_no_reader_holds_the_run_back(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    logs, pipe = tmp_path / "logs", tmp_path / "groups.pipe"
    os.mkfifo(pipe)
    done: list[RunSummary] = []
    runner = threading.Thread(target=lambda: done.append(_run(tasks, logs, stub, pipe, jobs=1)))
    runner.start()
    deadline = time.monotonic() + 30
    while not (logs / "stream").is_dir():  # the first group's shard: its line waits
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)
    started = sorted(p.parent.name for p in (logs / "rollouts").glob("*/exchanges.jsonl*"))
    assert started == ["a", "a_r1"] and runner.is_alive()  # b waits for a reader
    with open(pipe, "rb") as reader:
        lines = reader.read().splitlines()
    runner.join(30)
    assert done and len(done[0].results) == 4
    assert [orjson.loads(x)["task"] for x in lines] == ["a", "b"]
