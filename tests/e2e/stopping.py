"""Helpers of the stopping tests: `contagent run` as a real process, its stderr read live."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contagent.agents import get_agent
from contagent.runner import docker_ops
from contagent.testing.llm_stub import RunningStub
from tests.e2e.helpers import MODEL, REPO, chat_requests

#: the cheapest agent image to start: the stopping tests need rollouts in flight, not OpenHands
AGENT = "mini-swe-agent"
AGENT_IMAGE = get_agent(AGENT).image
CLI = [sys.executable, "-c", "from contagent.cli import main; main()"]


class RunProcess:
    """A ``contagent run`` (or any CLI command) in its own process; stderr kept as it comes."""

    def __init__(
        self, args: Sequence[str], owner: str, env: dict[str, str] | None = None, **popen: Any
    ) -> None:
        self.lines: list[str] = []
        full_env = {**os.environ, "CONTAGENT_OWNER": owner, **(env or {})}
        popen.setdefault("stderr", subprocess.PIPE)
        popen.setdefault("stdout", subprocess.DEVNULL)
        self.proc = subprocess.Popen([*CLI, *args], env=full_env, text=True, **popen)
        self._reader: threading.Thread | None = None
        if self.proc.stderr is not None:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stderr:
                return
            if self.proc.poll() is not None and self._reader is not None:
                self._reader.join(5)
                if text in self.stderr:
                    return
                break
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} on stderr: {self.stderr[-3000:]}")

    def wait(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout=timeout)
        if self._reader is not None:
            self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def run_args(
    stub_url: str,
    log_dir: Path,
    run_id: str,
    *more: str,
    experiments_dir: Path = REPO / "experiments",
) -> list[str]:
    return [
        "run",
        "--served-model-name",
        MODEL,
        "--vllm-url",
        stub_url,
        "--experiments-dir",
        str(experiments_dir),
        "--experiment",
        "exp_001",
        "--agent",
        AGENT,
        "--log-dir",
        str(log_dir),
        "--run-id",
        run_id,
        "--timeout",
        "300",
        "--max-iterations",
        "10",
        *more,
    ]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_calls(stub: RunningStub, n: int, timeout: float = 180) -> None:
    """Until ``n`` rollouts are in flight, each waiting for the model."""
    wait_until(lambda: len(chat_requests(stub)) >= n, timeout, f"{n} LLM calls")


def left(client: Any, run_id: str) -> list[str]:
    return sorted(docker_ops.leftovers(client, {docker_ops.LABEL_RUN: run_id}))
