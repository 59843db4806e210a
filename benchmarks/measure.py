"""Timing a command in a fresh process, shared by the benchmarks that compare commands."""

from __future__ import annotations

import resource
import subprocess
import time


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, all processes) and peak RSS (MiB) of a command.

    CPU seconds make the figures comparable on a machine that other work shares;
    the RSS is that of the largest single process (a worker pool's processes are
    counted one by one). The command runs outside any source tree: ``python -m``
    puts the working folder first on ``sys.path``, which would shadow the tree
    that ``PYTHONPATH`` names.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/"
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, max(after.ru_maxrss, before.ru_maxrss) / 1024
