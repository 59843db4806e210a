"""Timing a command in a fresh process, shared by the benchmarks that compare commands."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(
    cmd: list[str], env: dict[str, str] | None = None, check: bool = True
) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds (user + system, all processes), peak RSS (MiB) and exit
    status of a command.

    CPU seconds make the figures comparable on a machine that other work shares;
    the RSS is that of the largest single process (a worker pool's processes are
    counted one by one). The command runs outside any source tree: ``python -m``
    puts the working folder first on ``sys.path``, which would shadow the tree
    that ``PYTHONPATH`` names.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/"
    )
    # this child's own usage: the process-wide RUSAGE_CHILDREN keeps the largest RSS of
    # every child so far
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def medians(
    cmd: list[str],
    env: dict[str, str] | None,
    repeat: int,
    prepare: Callable[[], object] | None = None,
) -> tuple[float, float, float]:
    """The median wall seconds, CPU seconds and peak RSS (MiB) of ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        if prepare is not None:
            prepare()
        runs.append(timed(cmd, env))
    return tuple(statistics.median(r[i] for r in runs) for i in range(3))  # type: ignore[return-value]


def bytecode_env(src: Path, work: Path) -> dict[str, str]:
    """The environment that runs the contagent of source tree ``src`` from compiled
    bytecode, as an installed package runs (pip compiles it): a cache under ``work``,
    even where ``PYTHONDONTWRITEBYTECODE`` is set."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def load() -> str:
    """The machine's load averages (1, 5 and 15 minutes), to print beside a figure."""
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())
