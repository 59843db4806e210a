"""Shared CLI helpers: one-line errors, consoles."""

from __future__ import annotations

import gc
import importlib.abc
import os
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
    """Call ``fn``; turn a :class:`ContagentError` into a one-line error and exit.

    The cyclic garbage collector is on while ``fn`` runs. A quick start turned it off;
    what the start-up made (modules, classes) is then frozen, so that the collector
    never walks it.
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
    try:
        return fn()
    except ContagentError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt as exc:  # 128 plus the signal's number (Ctrl-C: 130)
        fail("interrupted", getattr(exc, "exit_code", 130))


class _NoArrayLibraries(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in ("numpy", "pandas"):
            raise ImportError(f"{name} is not used by this command")
        return None


def lean_pyarrow() -> None:
    """Import pyarrow for this process without numpy and pandas.

    pyarrow imports numpy when it loads (about half its import time) and pandas on
    its first conversion from Python objects (about 0.3 s), to recognise their
    arrays; the export and validate commands hand it only Python objects. Only for a
    process that never hands it any (the CLI's): pyarrow then takes both libraries
    for not installed, and treats their objects as plain sequences. Both stay
    importable by whatever else runs later.
    """
    if "pyarrow" in sys.modules:
        return
    blocker = _NoArrayLibraries()
    sys.meta_path.insert(0, blocker)
    try:
        import pyarrow

        pyarrow.array([0])
    finally:
        sys.meta_path.remove(blocker)


#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def is_glibc() -> bool:
    """Whether this process's C library is glibc (whose ``mallopt`` parameters are set)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False


def tune_allocator() -> None:
    """Keep the raw-log readers' chunks in the C heap, reused, instead of fresh mappings.

    The readers allocate a 4 MiB chunk at a time (several alive at once: the one parsed,
    the next, the hashing thread's). glibc gives a block that size a mapping of its own,
    or returns the heap's top to the system past twice the last such size, so each chunk
    read costs about a thousand page faults and the zeroing of its pages: a third of the
    105 MB export's system time. Fixed thresholds (blocks under 8 MiB from the heap, its
    top returned past 16 MiB) keep the chunks' memory in use: that export's page faults
    fall from about 35,000 to 12,500, the 1 GB log's from 200,000 to 115,000 at the same
    peak RSS (higher thresholds save more faults there but hold more memory). Only for
    glibc (the C library's ``mallopt``); the CLI's export and validate own their process,
    so they set it.
    """
    if not is_glibc():
        return
    import ctypes

    libc = ctypes.CDLL(None)
    libc.mallopt(_M_MMAP_THRESHOLD, 8 << 20)
    libc.mallopt(_M_TRIM_THRESHOLD, 16 << 20)


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MAX_RAW_LOG_HELP = (
    "Largest raw log read, in plain (decompressed) bytes for either form; "
    "a suffix K, M, G (powers of 1024) may follow. Default 1G."
)


def raw_log_limit(text: str | None) -> int:
    """The ``--max-raw-log`` given, or the readers' default."""
    from contagent.rawlog.read import MAX_RAW_LOG_BYTES

    return MAX_RAW_LOG_BYTES if text is None else parse_size(text, "--max-raw-log")


def parse_size(text: str, option: str) -> int:
    """``"256M"`` -> 268435456; a bad size is a one-line error naming ``option``."""
    value = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)]
    if not number.isdigit() or int(number) < 1:
        fail(f"{option} {text!r} is not a size (a positive number of bytes, e.g. 512M or 2G)")
    return int(number) * _UNITS[unit]
