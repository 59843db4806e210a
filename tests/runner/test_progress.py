"""`contagent run`'s live progress display (no Docker engine)."""

from __future__ import annotations

import io
import threading

import pytest
from rich.console import Console
from rich.live import Live

from contagent.cli import run_cmd
from contagent.runner.run import RunEvent


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
    monkeypatch.setattr(run_cmd, "console", console)
    progress = run_cmd._Progress()

    def show() -> None:
        with Live(progress, console=console, auto_refresh=False, redirect_stdout=False):
            progress.on_event(event)

    shown = threading.Thread(target=show, daemon=True)
    shown.start()
    shown.join(10)
    assert not shown.is_alive(), f"a {event.kind!r} event deadlocked the live display"
    assert event.message in out.getvalue()
