"""Which rollouts the LLM server ended, and when the run holds back or stops (no Docker engine)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent.errors import ContagentError
from contagent.rawlog.result import RolloutResult
from contagent.runner.stopping.failfast import LLM_SERVER_STOP, FailFast, server_failure


def write_log(path: Path, *outcomes: dict[str, Any] | None) -> Path:
    """One request per entry, then its outcome (None: no outcome, as a crash leaves it)."""
    lines = []
    for i, out in enumerate(outcomes):
        lines.append({"type": "request", "index": i, "rollout_id": "r", "body": {}})
        if out is not None:
            lines.append({"type": "outcome", "index": i, "rollout_id": "r", **out})
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return path


OK = {"outcome": "completed", "status": 200}
REFUSED = {"outcome": "upstream_error", "status": None,
           "error": "upstream unreachable: [Errno 111] Connection refused"}  # fmt: skip


@pytest.mark.parametrize(
    ("outcomes", "reason"),
    [
        ([OK, REFUSED], "the LLM server failed exchange 1: upstream unreachable: [Errno 111] Connection refused"),
        ([OK, {"outcome": "http_error", "status": 503, "error": "http status 503"}],
         "the LLM server failed exchange 1: http status 503"),
        ([{"outcome": "http_error", "status": 429, "error": "http status 429"}],
         "the LLM server failed exchange 0: http status 429"),
        ([{"outcome": "upstream_error", "status": 200, "error": "upstream body is not valid JSON"}],
         "the LLM server failed exchange 0: upstream body is not valid JSON"),
        # the request's own fault (context too long, bad tool schema): the agent's error
        ([OK, {"outcome": "http_error", "status": 400, "error": "http status 400"}], None),
        ([REFUSED, OK], None),  # the server came back; the agent stopped for another reason
        ([OK, REFUSED, None], None),  # the last request has no outcome: not known to be the server
        ([OK, {"outcome": "abandoned", "status": None, "error": "client disconnected"}], None),
        ([], None),
    ],
)  # fmt: skip
def test_server_failure_is_the_last_exchange_failing_on_the_server_side(
    tmp_path: Path, outcomes: list[dict[str, Any] | None], reason: str | None
) -> None:
    assert server_failure(write_log(tmp_path / "x.jsonl", *outcomes)) == reason


def test_server_failure_tolerates_a_missing_log_and_a_torn_line(tmp_path: Path) -> None:
    assert server_failure(tmp_path / "missing.jsonl") is None
    log = write_log(tmp_path / "x.jsonl", OK, REFUSED)
    with log.open("ab") as fh:
        fh.write(b'{"type": "request", "ind')
    assert server_failure(log) is not None


def result(status: str, stop: str | None = None, started: float = 0.0) -> RolloutResult:
    return RolloutResult(
        rollout_id="r", status=status, stop_condition=stop, started=started, error="why"
    )  # type: ignore[arg-type]


DOWN = result("infra_error", LLM_SERVER_STOP, started=100.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def refusing(clock: Clock) -> Callable[[float], object]:
    """A server that never comes back: the wait uses up its time, then raises."""

    def wait(seconds: float) -> object:
        clock.now += seconds
        raise ContagentError("LLM server not ready: GET http://h/v1/models: connection refused")

    return wait


def test_pauses_after_consecutive_server_failures_only() -> None:
    guard = FailFast(wait_s=60, clock=Clock())
    guard.observe(DOWN)
    assert not guard.paused  # one can be a blip
    guard.observe(result("passed"))  # a verdict: the server worked for that rollout
    guard.observe(DOWN)
    assert not guard.paused
    guard.observe(result("infra_error", None))  # docker trouble says nothing about the server
    guard.observe(DOWN)
    assert guard.paused


@pytest.mark.parametrize("verdict", ["failed", "agent_error", "timeout"])
def test_any_verdict_resets_the_streak(verdict: str) -> None:
    guard = FailFast(wait_s=60, pause_after=2, clock=Clock())
    guard.observe(DOWN)
    guard.observe(result(verdict))
    guard.observe(DOWN)
    assert not guard.paused


def test_a_server_that_stays_down_stops_the_run_after_the_wait() -> None:
    clock = Clock()
    guard = FailFast(wait_s=60, clock=clock)
    guard.observe(DOWN)  # the streak starts at 100
    clock.now = 110
    guard.observe(DOWN)
    waited: list[float] = []
    wait = refusing(clock)
    reason = guard.recheck(lambda s: (waited.append(s), wait(s)))
    assert waited == [50]  # the wait counts from the first failure of the streak
    assert reason == (
        "2 rollouts in a row ended on the LLM server (why); LLM server not ready: "
        "GET http://h/v1/models: connection refused"
    )


def test_a_server_that_comes_back_lets_the_run_go_on_and_old_failures_do_not_count() -> None:
    clock = Clock()
    guard = FailFast(wait_s=60, clock=clock)
    guard.observe(DOWN)
    guard.observe(DOWN)

    def back_after_20(seconds: float) -> object:
        clock.now += 20
        return 20.0

    assert guard.recheck(back_after_20) is None
    assert not guard.paused
    # rollouts that were running while it was down still end on it: they are not news
    guard.observe(result("infra_error", LLM_SERVER_STOP, started=105.0))
    guard.observe(result("infra_error", LLM_SERVER_STOP, started=110.0))
    assert not guard.paused
    # a rollout started after the check that fails on it again is
    guard.observe(result("infra_error", LLM_SERVER_STOP, started=125.0))
    guard.observe(result("infra_error", LLM_SERVER_STOP, started=126.0))
    assert guard.paused


def test_a_server_that_lists_the_model_but_keeps_failing_is_stopped_after_the_wait() -> None:
    clock = Clock()
    guard = FailFast(wait_s=60, clock=clock)

    def lists_the_model(seconds: float) -> object:
        return 0.0

    stops = []
    for minute in range(5):
        clock.now = 100 + 30 * minute
        guard.observe(result("infra_error", LLM_SERVER_STOP, started=clock.now))
        guard.observe(result("infra_error", LLM_SERVER_STOP, started=clock.now))
        assert guard.paused
        stops.append(guard.recheck(lists_the_model))
    assert stops[:2] == [None, None]
    assert (
        stops[2] is not None
        and "for more than --wait-for-llm 60 s, though it lists the model" in stops[2]
    )


def test_wait_zero_stops_at_the_first_pause_even_when_the_check_passes() -> None:
    guard = FailFast(wait_s=0, clock=Clock())
    guard.observe(DOWN)
    guard.observe(DOWN)
    assert guard.recheck(lambda s: 0.0) is not None


# -- the scheduling loop's use of the rule (run._hold_back) -------------------------------


class Executor:
    """The executor seam as the loop sees it: what it was told to cancel, and why."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def cancel(self, reason: str = "interrupted") -> None:
        self.reason = reason


def hold_back_setup(
    tmp_path: Path, queued: int
) -> tuple[FailFast, Executor, list[Any], Any, list[Any]]:
    from contagent.runner.lifecycle.rollout import RolloutPlan
    from contagent.runner.summary import RunSummary
    from contagent.runner.tasks.experiment import load_experiment
    from tests.runner.helpers import write_experiment

    exp = load_experiment(write_experiment(tmp_path / "exps", "e", {"task": "t"}), None)
    ctx = Executor()
    guard = FailFast(wait_s=60, clock=Clock())
    guard.observe(DOWN)
    guard.observe(DOWN)
    return guard, ctx, [RolloutPlan(exp, k) for k in range(queued)], RunSummary("r", tmp_path), []


@pytest.mark.parametrize("queued", [2, 0])
def test_the_loop_stops_the_run_when_the_server_is_not_back(tmp_path: Path, queued: int) -> None:
    from contagent.runner.run import _hold_back

    guard, ctx, queue, summary, events = hold_back_setup(tmp_path, queued)
    calls: list[float] = []
    wait = refusing(Clock())
    _hold_back(guard, lambda s: (calls.append(s), wait(s)), ctx, queue, summary, events.append)
    assert len(calls) == 1
    assert summary.stopped and summary.stopped.startswith(
        "2 rollouts in a row ended on the LLM server"
    )
    assert summary.not_started == ["e", "e_r1"][:queued] and queue == []
    # running rollouts are stopped too (with nothing queued they would wait on a dead server)
    assert ctx.reason == f"run stopped: {summary.stopped}"
    assert [e.kind for e in events] == ["paused", "stopped"]
    assert summary.exit_code == 1
    _hold_back(guard, lambda s: calls.append(s), ctx, queue, summary, events.append)
    assert len(calls) == 1  # stopped once; not checked again while the rest winds down


def test_the_loop_goes_on_when_the_server_is_back_and_does_not_check_while_not_paused(
    tmp_path: Path,
) -> None:
    from contagent.runner.run import _hold_back

    guard, ctx, queue, summary, events = hold_back_setup(tmp_path, 1)
    _hold_back(guard, lambda s: 0.0, ctx, queue, summary, events.append)
    assert summary.stopped is None and ctx.reason is None and len(queue) == 1
    assert [e.kind for e in events] == ["paused", "ready"] and not guard.paused

    def must_not_wait(seconds: float) -> object:
        raise AssertionError("checked the server while rollouts were fine")

    _hold_back(guard, must_not_wait, ctx, queue, summary, events.append)
    assert summary.exit_code == 0
