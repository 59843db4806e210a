"""``<log-dir>/runs/<run-id>.log``: what ``contagent run`` says, also on a file.

After SIGHUP the terminal is gone, so the lines that matter on the way out (the stop,
what was left, the summary table, the exit line) are written here too. Each line is one
``os.write`` on a file opened for appending, so a line written from a signal handler
never tangles with one being written. A log that cannot be written (a full disk) is
given up quietly: the run says why it stops on the terminal and in its exit code.
"""

from __future__ import annotations

import io
import os
import socket
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from contagent.layout import RunPaths


class RunLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._failed = False

    def _open(self) -> int | None:
        if self._fd is None and not self._failed:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError:
                self._failed = True
        return self._fd

    def _write(self, text: str) -> None:
        fd = self._open()
        if fd is None:
            return
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        except OSError:
            pass

    def line(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        self._write(f"{stamp} {text}\n")

    def render(self, *renderables: Any) -> None:
        buf = io.StringIO()
        Console(file=buf, width=160, color_system=None, force_terminal=False).print(
            *renderables, soft_wrap=True
        )
        self._write(buf.getvalue())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def open_journal(config: Any) -> RunLog:
    """The run log of ``config``'s run, its first line written."""
    journal = RunLog(RunPaths(config.log_dir).run_log(config.run_id))
    journal.line(
        f"run {config.run_id} started: pid {os.getpid()} on {socket.gethostname()}, "
        f"log dir {config.log_dir}"
    )
    return journal


def exit_line(summary: Any) -> str | None:
    """The one line the run ends with on stderr, or None for a plain exit."""
    if summary.interrupted:
        from contagent.runner.stopping.leftovers import describe
        from contagent.runner.stopping.signals import signal_name

        cleaned = (
            "the run's containers and networks were removed"
            if summary.left == []
            else describe(summary.left, summary.run_id)
        )
        return (
            f"interrupted by {signal_name(summary.signal or 2)}; {cleaned} "
            "(--resume runs what is left)"
        )
    if summary.stopped is not None:
        return f"run stopped: {summary.stopped}"
    return None
