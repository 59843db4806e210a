"""`contagent run`'s live progress display and the counts it shows (no Docker engine)."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
from rich.console import Console
from rich.live import Live

from contagent.cli import run_view
from contagent.rawlog.result import RolloutResult, TokenTotals
from contagent.runner.progress import RunProgress
from contagent.runner.summary import RunEvent, RunSummary


@pytest.mark.parametrize(
    "event",
    [
        RunEvent("notice", name="exp_001__codex", message="codex cannot honour --temperature"),
        RunEvent("waiting", message="waiting for the LLM server"),
        RunEvent("paused", message="2 rollouts in a row ended on the LLM server"),
        RunEvent("ready", message="LLM server back"),
        RunEvent("stopped", message="run stopped"),
    ],
)
def test_events_printed_while_the_display_is_live_do_not_hang_it(
    monkeypatch: pytest.MonkeyPatch, event: RunEvent
) -> None:
    # On a terminal, printing redraws the live display, which reads the progress under its lock.
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    monkeypatch.setattr(run_view, "console", console)
    progress = run_view.Progress()

    def show() -> None:
        with Live(progress, console=console, auto_refresh=False, redirect_stdout=False):
            progress.on_event(event)

    shown = threading.Thread(target=show, daemon=True)
    shown.start()
    shown.join(10)
    assert not shown.is_alive(), f"a {event.kind!r} event deadlocked the live display"
    assert event.message in out.getvalue()


def _result(name: str, status: str, tokens: int | None, node: str | None = None) -> RolloutResult:
    totals = None if tokens is None else TokenTotals(total_tokens=tokens)
    return RolloutResult(rollout_id=name, status=status, tokens=totals, node=node)


def test_progress_counts_each_rollout_once_by_its_verdict() -> None:
    progress = RunProgress()
    events = [
        RunEvent("planned", total=4),
        RunEvent("problem", name="bad", message="bad: no task.toml"),
        RunEvent("waiting", message="waiting for the LLM server"),
        RunEvent("ready", message="LLM server ready"),
        RunEvent("skipped", name="a", result=_result("a", "passed", 10, node="h1")),
        RunEvent("started", name="b"),
        RunEvent("started", name="c"),
        RunEvent("finished", name="b", result=_result("b", "failed", 5, node="h1")),
        RunEvent("finished", name="c", result=_result("c", "infra_error", None, node="h2")),
        RunEvent("started", name="d"),
    ]
    for event in events:
        progress.observe(event)
    assert (progress.total, progress.done, list(progress.running)) == (4, 3, ["d"])
    assert (progress.passed, progress.failed, progress.errors, progress.tokens) == (1, 1, 1, 15)
    assert progress.nodes == {"h1": 1, "h2": 1}  # a resumed rollout ran on no node of this run
    assert progress.problems == ["bad: no task.toml"] and progress.status == ""


def test_summary_totals_count_resumed_rollouts_too(tmp_path: Path) -> None:
    summary = RunSummary(
        "r",
        tmp_path,
        results=[_result("b", "failed", 5), _result("c", "passed", None)],
        resumed=[_result("a", "passed", 10)],
    )
    assert summary.totals() == (2, 3, 15)
    assert RunSummary("r", tmp_path).totals() == (0, 0, 0)
