"""The shared rollout lifecycle with stand-in phases, network and proxy (no Docker engine):
it owns the errors, the clean-up, the incomplete-log check, the verdict and result.json."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import requests.exceptions

from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.rawlog.result import ExitCodes, RolloutStatus, load_result
from contagent.runner import docker_ops
from contagent.runner.config import LlmOptions, RunConfig
from contagent.runner.lifecycle import rollout_lifecycle as lifecycle
from contagent.runner.lifecycle.rollout import LOG_DIR_STOP, RolloutPlan, RunContext
from contagent.runner.lifecycle.rollout_lifecycle import PhaseFacts
from contagent.runner.tasks.experiment import load_experiment
from tests.runner.helpers import write_experiment


class _Proxy:
    def __init__(self, record_errors: list[str]) -> None:
        self.proxy = self
        self.record_errors = record_errors
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


class _Phases:
    """Phases that do what a test says: raise, or end with a given verdict."""

    raises: BaseException | None = None
    status: RolloutStatus = "passed"

    def __init__(self, ctx: RunContext, plan: RolloutPlan, agent: Any) -> None:
        self.image: str | None = "img"
        self.llm = None
        self.judged = False
        self.written: tuple[RolloutStatus, str | None] | None = None

    def run(self, prefix: str, net: Any, proxy: Any, collected: Path) -> None:
        if self.raises is not None:
            raise self.raises

    def verdict(self) -> tuple[RolloutStatus, str | None]:
        self.judged = True
        return self.status, None

    def write_files(self, collected: Path, status: RolloutStatus, error: str | None) -> None:
        self.written = (status, error)

    def facts(self, status: RolloutStatus) -> PhaseFacts:
        return PhaseFacts(ExitCodes(setup=0), {"setup_s": 1.0}, reward=1.0)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    exp = load_experiment(write_experiment(tmp_path / "exps", "e", {"task": "t"}), None)
    config = RunConfig(tmp_path / "exps", tmp_path / "logs", "http://127.0.0.1:9", LlmOptions("m"))
    ctx = RunContext(config, RunPaths(tmp_path / "logs"), None, threading.Event())  # type: ignore[arg-type]
    made: dict[str, Any] = {
        "ctx": ctx,
        "plan": RolloutPlan(exp, 0),
        "cleaned": [],
        "proxy": _Proxy([]),
    }
    monkeypatch.setattr(docker_ops, "create_network", lambda *a: object())
    monkeypatch.setattr(lifecycle, "start_rollout_proxy", lambda *a: made["proxy"])
    monkeypatch.setattr(
        docker_ops, "remove_labelled", lambda client, labels: made["cleaned"].append(labels)
    )
    return made


def _run(world: dict[str, Any], **how: Any) -> tuple[Any, _Phases]:
    made: list[_Phases] = []

    def make(ctx: RunContext, plan: RolloutPlan, agent: Any) -> _Phases:
        phases = _Phases(ctx, plan, agent)
        for key, value in how.items():
            setattr(phases, key, value)
        made.append(phases)
        return phases

    result = lifecycle.run_rollout(world["ctx"], world["plan"], make)
    return result, made[0]


def test_a_clean_run_takes_the_kinds_verdict_and_writes_result_json(world):
    result, phases = _run(world)
    assert (result.status, result.passed, result.reward, result.error) == (
        "passed",
        True,
        1.0,
        None,
    )
    assert phases.judged and phases.written == ("passed", None)
    assert world["proxy"].stopped and len(world["cleaned"]) == 1
    saved = load_result(world["ctx"].paths.rollout("e").result)
    assert saved == result and saved.image == "img" and saved.timings.overhead_s is not None


def test_docker_trouble_is_the_rollouts_infra_error_and_is_cleaned_up(world):
    result, phases = _run(world, raises=ContagentError("no such image x"))
    assert (result.status, result.error) == ("infra_error", "no such image x")
    assert not phases.judged and world["proxy"].stopped and len(world["cleaned"]) == 1
    result, _ = _run(world, raises=OSError("disk gone\nmore"))
    assert result.error == "OSError: disk gone"  # one line


def test_an_engine_that_is_gone_stops_the_run_and_is_not_cleaned_up(world):
    result, _ = _run(world, raises=requests.exceptions.ConnectionError("refused"))
    assert result.status == "infra_error" and result.stop_condition == docker_ops.ENGINE_STOP
    assert world["cleaned"] == []


def test_an_incomplete_raw_log_claims_no_verdict(world):
    world["proxy"].record_errors.append("disk full")
    result, phases = _run(world)
    assert (result.status, result.stop_condition) == ("infra_error", LOG_DIR_STOP)
    assert result.error == "the raw exchange log is incomplete: disk full" and not phases.judged


def test_a_cancelled_run_is_an_infra_error_with_the_reason(world):
    world["ctx"].cancel.set()
    world["ctx"].cancel_reason = "stopped by SIGINT"
    result, phases = _run(world)
    assert (result.status, result.error) == ("infra_error", "stopped by SIGINT")
    assert not phases.judged


def test_an_agent_error_reads_as_such_when_the_server_did_not_fail_it(world):
    result, _ = _run(world, status="agent_error")
    assert result.status == "agent_error" and result.stop_condition is None
