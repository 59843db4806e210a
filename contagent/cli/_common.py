"""Shared CLI helpers: one-line errors, consoles."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer
from rich.console import Console

from contagent.errors import ContagentError

console = Console(stderr=True)
T = TypeVar("T")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``contagent: error: <message>`` on stderr and exit with ``code``."""
    sys.stderr.write(f"contagent: error: {message}\n")
    raise typer.Exit(code)


def run_guarded(fn: Callable[[], T]) -> T:
    """Call ``fn``; turn a :class:`ContagentError` into a one-line error and exit."""
    try:
        return fn()
    except ContagentError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt as exc:  # 128 plus the signal's number (Ctrl-C: 130)
        fail("interrupted", getattr(exc, "exit_code", 130))
