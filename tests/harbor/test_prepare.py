"""Before any rollout: what a task needs where it runs is made once per (task, agent), and
what cannot be made is a planning-time problem or a one-line refusal of the run."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from contagent.errors import ContagentError
from contagent.rawlog.result import RolloutResult
from contagent.runner import run as run_module
from contagent.runner.config import LlmOptions, RunConfig
from contagent.runner.executors.ray_prepare import node_problems
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.runner.run import run_experiments
from contagent.runner.tasks.experiment import ExperimentProblem
from tests.harbor.helpers import write_task

NODES = [
    {"NodeManagerAddress": "10.0.0.1", "NodeID": "aaaaaaaaaaaaaaaaaaaa"},
    {"NodeManagerAddress": "10.0.0.2", "NodeID": "bbbbbbbbbbbbbbbbbbbb"},
]


class FakeExecutor:
    """Refuses what ``refuse`` names at prepare time; every rollout it runs passes."""

    def __init__(self, refuse: dict[tuple[str, str | None], str]) -> None:
        self.refuse = refuse
        self.prepared: list[tuple[str, str]] = []
        self.submitted: list[str] = []
        self.closed = False

    def prepare(self, plans: list[RolloutPlan]) -> list[ExperimentProblem]:
        self.prepared = sorted({(p.experiment.name, p.agent) for p in plans})
        return [ExperimentProblem(n, why, agent=a) for (n, a), why in self.refuse.items()]

    def submit(self, plan: RolloutPlan) -> Future[RolloutResult]:
        self.submitted.append(plan.name)
        fut: Future[RolloutResult] = Future()
        fut.set_result(RolloutResult(rollout_id=plan.name, status="passed", agent=plan.agent))
        return fut

    def cancel(self, reason: str = "interrupted") -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeExecutor) -> Any:
    tasks = tmp_path / "tasks"
    for name in ("good", "bad"):
        task = write_task(tasks / name, '[environment]\ndocker_image = "base:1"\n')
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text("#!/bin/sh\n")
    monkeypatch.setattr(run_module, "open_executor", lambda *a: fake)
    config = RunConfig(
        experiments_dir=tasks,
        log_dir=tmp_path / "logs",
        upstream_url="http://127.0.0.1:9/v1",
        llm=LlmOptions(served_model_name="none"),
        agents=("oracle",),
        repeat=2,
        owner="test-prepare",
        run_id="prepare-test",
    )
    events: list[Any] = []
    summary = run_experiments(config, events.append)
    return summary, events


def test_a_refused_task_and_agent_is_a_problem_and_none_of_its_rollouts_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = "bad: oracle: the task image has no glibc, which the agent's runtime needs"
    fake = FakeExecutor({("bad", "oracle"): why})
    summary, events = _run(tmp_path, monkeypatch, fake)
    assert fake.prepared == [("bad", "oracle"), ("good", "oracle")]  # once per pair
    assert sorted(fake.submitted) == ["good", "good_r1"]
    assert [(p.name, p.message) for p in summary.problems] == [("bad", why)]
    assert summary.exit_code == 1 and fake.closed
    planned = next(e for e in events if e.kind == "planned")
    assert planned.total == 2
    assert any(e.kind == "problem" and e.message == why for e in events)


def test_with_every_task_refused_no_rollout_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeExecutor({("bad", None): "bad: refused", ("good", None): "good: refused"})
    summary, _ = _run(tmp_path, monkeypatch, fake)
    assert fake.submitted == [] and summary.results == [] and fake.closed
    assert summary.exit_code == 1


def test_a_ray_node_that_cannot_build_refuses_the_run_naming_it() -> None:
    tasks: dict[str, Any] = {"t": type("T", (), {"root": Path("/tasks/t")})()}
    answers: list[list[Any]] = [[], [("t", "codex", False, "image build failed: no space left")]]
    with pytest.raises(ContagentError) as info:
        node_problems(NODES, answers, tasks)
    assert str(info.value) == (
        "Ray node 10.0.0.2/bbbbbbbbbbbb cannot build the image of task t for codex: "
        "image build failed: no space left"
    )


def test_a_task_refused_on_the_ray_nodes_is_one_problem_for_that_agent() -> None:
    tasks: dict[str, Any] = {"t": type("T", (), {"root": Path("/tasks/t")})()}
    why = "the task image has no /usr/bin/python3.13, which the agent's runtime needs"
    answers: list[list[Any]] = [[("t", "openhands", True, why)]] * 2
    (problem,) = node_problems(NODES, answers, tasks)
    assert (problem.name, problem.agent) == ("t", "openhands")
    assert problem.message == f"/tasks/t: openhands: {why}"
