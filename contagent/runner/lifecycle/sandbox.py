"""A long-running sandbox container driven from the host with ``docker exec``.

Nothing of contagent's runs inside: each phase is one exec of a shell command,
waited for from the host with a deadline, its exit code read from the engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from contagent.runner import docker_ops


@dataclass(frozen=True)
class ExecResult:
    code: int | None  # None: still running at the deadline (or cancelled), then stopped
    seconds: float
    timed_out: bool


class Sandbox:
    def __init__(self, client: docker.DockerClient, container: Any) -> None:
        self.client = client
        self.container = container

    def exec(
        self,
        argv: list[str],
        *,
        deadline: float,
        cancelled: Callable[[], bool],
        user: str | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the sandbox until it ends, the deadline passes or ``cancelled()``."""
        api = self.client.api
        t0 = time.monotonic()
        exec_id = api.exec_create(
            self.container.id,
            argv,
            stdout=False,
            stderr=False,
            user=user or "",
            workdir=workdir,
            environment=env or None,
        )["Id"]
        api.exec_start(exec_id, detach=True)
        while True:
            info = api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return ExecResult(int(info["ExitCode"]), time.monotonic() - t0, False)
            if time.monotonic() >= deadline or cancelled():
                return ExecResult(None, time.monotonic() - t0, time.monotonic() >= deadline)
            time.sleep(0.2)

    def sh(self, script: str, *, timeout_s: float = 60.0, user: str | None = "root") -> int | None:
        """A short shell step as root (set-up, clean-up); its exit code."""
        return self.exec(
            ["sh", "-c", script],
            deadline=time.monotonic() + timeout_s,
            cancelled=lambda: False,
            user=user,
        ).code

    def output(self, script: str, limit: int = 64 * 1024) -> str:
        """What a short shell step as root prints (at most ``limit`` bytes of it)."""
        _, out = self.container.exec_run(["sh", "-c", f"{{ {script}; }} | head -c {limit}"])
        return bytes(out or b"")[:limit].decode("utf-8", errors="replace")

    def put(self, entries: list[tuple[str, Path | bytes, int]]) -> None:
        self.container.put_archive("/", docker_ops.make_tar(entries))

    def get(self, path: str, dest: Path) -> bool:
        """Copy ``path`` out into ``dest``; False when it is not there."""
        try:
            bits, _ = self.container.get_archive(path)
        except docker.errors.NotFound:
            return False
        docker_ops.extract_tar(bits, dest)
        return True

    def stop_everything(self) -> None:
        """Stop every process in the sandbox (the agent's and all it left running), then
        start its idle command again: files stay, no process of the agent survives."""
        self.container.stop(timeout=1)

    def start(self) -> None:
        self.container.start()
