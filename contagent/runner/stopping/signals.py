"""How a ``contagent run`` stops on SIGINT, SIGTERM and SIGHUP.

The three are handled alike, as Ctrl-C always was: the first raises :class:`Stopped`
(a ``KeyboardInterrupt``) in the main thread, where the run stops its rollouts,
removes their containers and networks and leaves what was interrupted for
``--resume``; the process then exits 128 plus the signal number. SIGTERM is what
``docker stop``, Kubernetes, Slurm, systemd and CI systems send; SIGHUP what a closed
SSH session sends, after which the terminal is gone: output to it is sent to
``/dev/null`` instead, so the clean-up does not fail on writing to a dead terminal.

A second signal during that clean-up abandons it, but never silently: one line says
what of the run is still in Docker and the ``contagent gc --run-id`` that removes it,
then the process exits at once.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from contagent.runner.stopping import leftovers

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class Stopped(KeyboardInterrupt):
    """The run was asked to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def stop_signal(exc: BaseException) -> int:
    """The signal a KeyboardInterrupt stands for (a plain one is Ctrl-C's SIGINT)."""
    return exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT)


def _terminals() -> list[int]:
    """Which of stdin, stdout and stderr are a terminal (asked before it can hang up: a
    hung-up terminal no longer says it is one)."""
    found = []
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                found.append(fd)
        except OSError:
            pass
    return found


def _detach(fds: list[int]) -> None:
    """After SIGHUP writes to the terminal fail (EIO); send them nowhere instead."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            try:
                os.dup2(devnull, fd)
            except OSError:
                pass
    finally:
        os.close(devnull)


def abandon_line(signum: int, run_id: str) -> str:
    """What a second signal says: what is left, and how to remove it."""
    left = leftovers.left_by_run(run_id, timeout_s=5)
    return (
        f"contagent: error: second {signal_name(signum)} during clean-up: stopped cleaning up; "
        + leftovers.describe(left, run_id)
    )


@contextmanager
def stop_on_signals(
    run_id: str,
    say: Callable[[str], None] | None = None,
    exit_now: Callable[[int], None] = os._exit,
) -> Iterator[None]:
    """Within the block, the first signal raises :class:`Stopped`; a second one writes
    :func:`abandon_line` to stderr (and to ``say``) and exits 128 plus its number.
    Signals ignored on entry (``nohup``) stay ignored.

    Only in the main thread (Python delivers signals there); elsewhere a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    first: list[int] = []
    terminals = _terminals()

    def handler(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            _detach(terminals)
        if not first:
            first.append(signum)
            raise Stopped(signum)
        line = abandon_line(signum, run_id)
        try:
            os.write(2, line.encode() + b"\n")
        except OSError:
            pass
        if say is not None:
            say(line)
        exit_now(128 + signum)

    # a signal ignored when the run started stays ignored (`nohup` ignores SIGHUP)
    wanted = [sig for sig in HANDLED if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, handler) for sig in wanted}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
