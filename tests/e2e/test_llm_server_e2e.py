"""`contagent run` and an LLM server that is late, absent, wrong or dies mid-run.

Real engine, real runner image, real OpenHands agent; the LLM is the scripted stub,
started, stopped and restarted on a fixed loopback port by the tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.runner.stopping.failfast import LLM_SERVER_STOP
from contagent.testing.llm_stub import Reply, RunningStub, Script, start_stub_in_thread
from tests.e2e.helpers import MODEL, REPO, chat_requests, copy_experiment, secret_player
from tests.helpers import cli, free_port

pytestmark = pytest.mark.docker

StubFactory = Callable[[Script], RunningStub]


def created(docker_client: Any, run_id: str, since: float) -> list[str]:
    """Every container or network of the run the engine created since ``since``, even if gone."""
    events = docker_client.events(
        since=int(since) - 1, until=int(time.time()) + 1, decode=True,
        filters={"type": ["container", "network"], "event": ["create"]},
    )  # fmt: skip
    names = [e.get("Actor", {}).get("Attributes", {}).get("name", "") for e in events]
    return [n for n in names if n.startswith(f"contagent-{run_id}-")]


class Cli:
    """`contagent run` in a subprocess, its stderr collected as it comes."""

    def __init__(self, *args: str, owner: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "contagent", "run", *args],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "CONTAGENT_OWNER": owner, "COLUMNS": "200"},
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, "".join(self.lines)
            assert time.monotonic() < deadline, f"{text!r} never came:\n{''.join(self.lines)}"
            time.sleep(0.2)

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code, "".join(self.lines)


def run_args(url: str, log_dir: Path, run_id: str, *more: str) -> list[str]:
    return ["--served-model-name", MODEL, "--vllm-url", url, "--log-dir", str(log_dir),
            "--run-id", run_id, "--timeout", "300", "--max-iterations", "10", *more]  # fmt: skip


def result_of(log_dir: Path, name: str) -> RolloutResult:
    return RolloutResult.model_validate_json(RunPaths(log_dir).rollout(name).result.read_bytes())


def test_server_started_late_the_run_waits_then_passes(
    tmp_path: Path, run_id: str, owner: str, docker_client: Any
) -> None:
    port = free_port()
    t0 = time.time()
    run = Cli(*run_args(f"http://127.0.0.1:{port}/v1", tmp_path / "logs", run_id,
                        "--experiment", "exp_001", "--wait-for-llm", "120"), owner=owner)  # fmt: skip
    stub: RunningStub | None = None
    try:
        run.wait_for("waiting for the LLM server")
        time.sleep(2.5)  # a few more checks
        assert created(docker_client, run_id, t0) == []  # nothing starts while it waits
        stub = start_stub_in_thread(secret_player(), port=port, models=[MODEL])
        code, err = run.finish()
        flat = " ".join(err.split())
        assert code == 0, err
        assert (
            f"waiting for the LLM server: GET http://127.0.0.1:{port}/v1/models: connection refused"
            in flat
        )
        assert "ready: LLM server ready after" in flat
        assert "exit 0: every rollout reached a verdict" in flat
        assert result_of(tmp_path / "logs", "exp_001").status == "passed"
        assert stub.requests[0].path == "/v1/models"
        assert len(chat_requests(stub)) == 3
        assert created(docker_client, run_id, t0)  # the check above does see a run's objects
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
        if stub is not None:
            stub.stop()


def test_server_never_started_fails_in_one_line_and_creates_nothing(
    tmp_path: Path, run_id: str, owner: str, docker_client: Any
) -> None:
    port = free_port()
    t0 = time.time()
    proc = cli("run", *run_args(f"http://127.0.0.1:{port}/v1", tmp_path / "logs", run_id,
                                "--experiment", "exp_001", "--wait-for-llm", "3"),
               env={"CONTAGENT_OWNER": owner}, timeout=120)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "contagent: error: LLM server not ready within --wait-for-llm 3 s: "
        f"GET http://127.0.0.1:{port}/v1/models: connection refused"
    )
    assert "Traceback" not in proc.stderr
    assert created(docker_client, run_id, t0) == []
    assert not RunPaths(tmp_path / "logs").rollout("exp_001").root.exists()


def test_waiting_on_a_terminal_shows_the_live_status_line_and_ends(
    tmp_path: Path, run_id: str, owner: str
) -> None:
    """With a terminal, the status line is part of the live display (which printing refreshes)."""
    import pty
    import re

    master, slave = pty.openpty()
    args = run_args(f"http://127.0.0.1:{free_port()}/v1", tmp_path / "logs", run_id,
                    "--experiment", "exp_001", "--wait-for-llm", "4")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "contagent", "run", *args], cwd=REPO,
                            stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, "CONTAGENT_OWNER": owner, "COLUMNS": "200"})  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal's other side is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=10)
        os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))
    assert code == 1, text
    assert "rollouts 0/1 done" in text  # the live display ran
    assert "(2 s of --wait-for-llm 4 s)" in text  # and showed the wait as it went
    assert "contagent: error: LLM server not ready within --wait-for-llm 4 s" in " ".join(
        text.split()
    )


def test_wrong_served_model_name_lists_the_served_names(
    tmp_path: Path, run_id: str, owner: str, docker_client: Any, stub_factory: StubFactory
) -> None:
    stub = stub_factory(secret_player())
    t0 = time.time()
    args = run_args(stub.url + "/v1", tmp_path / "logs", run_id, "--experiment", "exp_001")
    args[1] = "qwen3-8b"  # --served-model-name; the default --wait-for-llm does not apply
    proc = cli("run", *args, env={"CONTAGENT_OWNER": owner}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"contagent: error: LLM server: GET {stub.url}/v1/models: model 'qwen3-8b' "
        f"(--served-model-name) is not served; it serves '{MODEL}'"
    )
    assert [(r.method, r.path) for r in stub.requests] == [("GET", "/v1/models")]
    assert created(docker_client, run_id, t0) == []


def test_server_killed_mid_run_stops_the_run_and_resume_completes_it(
    tmp_path: Path, run_id: str, owner: str, docker_client: Any
) -> None:
    exps = tmp_path / "exps"
    # a_slow is busy in setup.sh while the server dies; b and then c run into it; d is
    # still queued when the run stops.
    for name in ("a_slow", "b", "c", "d"):
        copy_experiment("exp_001", exps).rename(exps / name)
    slow_setup = exps / "a_slow" / "setup.sh"
    setup = slow_setup.read_text()
    slow_setup.write_text(setup.replace("set -euo pipefail\n", "set -euo pipefail\nsleep 600\n"))
    logs = tmp_path / "logs"
    args = run_args("", logs, run_id, "--experiments-dir", str(exps), "--jobs", "2",
                    "--timeout", "900", "--wait-for-llm", "3")  # fmt: skip

    # a server that hangs on every completion until it is killed
    dying = start_stub_in_thread(lambda req: Reply(content="never", delay=600), models=[MODEL])
    port = int(dying.url.rsplit(":", 1)[1])
    args[3] = dying.url + "/v1"  # --vllm-url
    run = Cli(*args, owner=owner)
    try:
        deadline = time.monotonic() + 120
        while not chat_requests(dying):  # b's agent asks the model
            assert time.monotonic() < deadline and run.proc.poll() is None, "".join(run.lines)
            time.sleep(0.2)
        dying.stop()
        code, err = run.finish()
    finally:
        dying.stop()
        if run.proc.poll() is None:
            run.proc.kill()
    flat = " ".join(err.split())
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "contagent: error: run stopped: 2 rollouts in a row ended on the LLM server "
        "(the LLM server failed exchange 0: "
    ), last
    assert f"GET http://127.0.0.1:{port}/v1/models: connection refused" in last
    assert "exit 1: 3 rollout(s) infra_error, 1 rollout(s) not started" in flat
    assert "Traceback" not in err
    from contagent.runner import docker_ops

    assert docker_ops.leftovers(docker_client, {docker_ops.LABEL_RUN: run_id}) == []
    for name in ("b", "c"):  # ended by the server: infra_error, so --resume re-runs them
        result = result_of(logs, name)
        assert (result.status, result.stop_condition) == ("infra_error", LLM_SERVER_STOP)
        assert result.error and result.error.startswith("the LLM server failed exchange 0: ")
    slow = result_of(logs, "a_slow")  # stopped with the run while still in setup.sh
    assert slow.status == "infra_error" and (slow.error or "").startswith("run stopped: ")
    assert not RunPaths(logs).rollout("d").root.exists()

    # The server is back: --resume runs the three infra_errors again and d for the first time.
    slow_setup.write_text(setup)
    stub = start_stub_in_thread(secret_player(), port=port, models=[MODEL])
    try:
        proc = cli("run", *args, "--resume", env={"CONTAGENT_OWNER": owner}, timeout=300)
        assert proc.returncode == 0, proc.stderr
        for name in ("a_slow", "b", "c", "d"):
            assert result_of(logs, name).status == "passed", name
        assert len(chat_requests(stub)) == 12
        aside = sorted(p.name.rsplit("-", 1)[0] for p in RunPaths(logs).superseded_dir.iterdir())
        assert aside == ["a_slow", "b", "c"]
    finally:
        stub.stop()
