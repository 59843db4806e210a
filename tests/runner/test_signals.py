"""How the run's signal handling behaves, without an engine: which signal raises what,
a second signal's line and exit, and signals ignored on entry staying ignored."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from contagent.runner.stopping import leftovers, signals
from contagent.runner.summary import RunSummary


def _until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for a signal's Python handler: it runs in the main thread at some later
    bytecode, later still on a loaded machine, so a fixed busy loop is not enough."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.001)


def test_first_signal_raises_stopped_with_its_exit_code() -> None:
    with signals.stop_on_signals("r1"), pytest.raises(signals.Stopped) as caught:
        signal.raise_signal(signal.SIGTERM)
        _until(lambda: False)
    assert (caught.value.signum, caught.value.exit_code) == (signal.SIGTERM, 143)
    assert signals.stop_signal(caught.value) == signal.SIGTERM
    assert signals.stop_signal(KeyboardInterrupt()) == signal.SIGINT


def test_second_signal_says_what_is_left_and_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        leftovers, "left_by_run", lambda run_id, timeout_s=10: ["container c1", "network n1"]
    )
    said: list[str] = []
    exits: list[int] = []
    # a signal ignored on entry stays ignored (SIGHUP under nohup, SIGINT in a shell's
    # background job): this test needs both handled
    previous = {
        signal.SIGHUP: signal.signal(signal.SIGHUP, signal.SIG_DFL),
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }
    try:
        with signals.stop_on_signals("r2", said.append, exits.append):
            with pytest.raises(signals.Stopped):
                signal.raise_signal(signal.SIGHUP)
                _until(lambda: False)
            signal.raise_signal(signal.SIGINT)
            _until(lambda: bool(exits))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert exits == [130]
    assert said == [
        "contagent: error: second SIGINT during clean-up: stopped cleaning up; left in Docker: "
        "1 container, 1 network (c1, n1); `contagent gc --run-id r2` removes them"
    ]


def test_a_signal_ignored_on_entry_stays_ignored() -> None:
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.stop_on_signals("r3"):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, old)


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_an_interrupted_run_exits_128_plus_the_signal(signum: int, code: int) -> None:
    from pathlib import Path

    summary = RunSummary(run_id="r", log_dir=Path("."), interrupted=True, signal=signum)
    assert summary.exit_code == code
    assert summary.exit_reason().startswith(
        f"exit {code}: interrupted by {signal.Signals(signum).name}"
    )


def test_describe_names_what_is_left() -> None:
    assert leftovers.describe([], "r") == "nothing of the run is left in Docker"
    assert "`contagent gc --run-id r` removes it once the engine is back" in leftovers.describe(
        None, "r"
    )


def test_a_driver_is_alive_only_with_its_process_id_and_start_time() -> None:
    me = leftovers.Driver.this_process()
    assert me.alive()
    assert leftovers.Driver.from_labels(me.labels()) == me
    reused = leftovers.Driver(me.host, me.pid, "1.00")  # the same id, another process
    assert not reused.alive()
    assert leftovers.Driver(me.host, 1, leftovers.UNKNOWN).alive()  # cannot tell: spared
    assert leftovers.Driver.from_labels({leftovers.LABEL_HOST: "h"}) is None
