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
import time
from pathlib import Path
from typing import Any

from rich.console import Console


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
