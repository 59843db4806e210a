"""Start and stop a real vLLM (its CPU build) serving the tier's tiny model.

The server runs in its own session, so stopping it stops the engine and worker
processes it spawns too. ``CONTAGENT_VLLM_PYTHON`` is the tier's venv Python and
``CONTAGENT_VLLM_MODEL`` the built model (scripts/ci-vllm.sh sets both).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVED_NAME = "tiny"
SEED = 0
#: seconds a cold start may take on 2 busy cores (about 60 s measured)
START_TIMEOUT_S = 600.0


def serve_args(model: Path, port: int) -> list[str]:
    return [
        "--model", str(model), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
        "--dtype", "bfloat16", "--enforce-eager", "--seed", str(SEED),
        "--no-enable-prefix-caching", "--trust-request-chat-template",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--reasoning-parser", "qwen3",
    ]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class VllmServer:
    proc: subprocess.Popen[bytes]
    port: int
    model: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


#: a server whose logprobs describe the distribution sampled from (as RL needs), and that
#: answers the render route (so the proxy learns its default sampling)
PROCESSED = ("--logprobs-mode", "processed_logprobs", "--enable-scale-out")


@contextmanager
def serving(model: Path, log: Path, *flags: str) -> Iterator[VllmServer]:
    """A server (given ``flags`` besides :func:`serve_args`) for a ``with`` block, a
    fixture's lifetime; stopped after it."""
    srv = start(model, log, flags=flags)
    try:
        yield srv
    finally:
        srv.stop()


def start(
    model: Path, log: Path, python: str | None = None, flags: tuple[str, ...] = ()
) -> VllmServer:
    """Start the server and wait until ``/health`` answers; raises RuntimeError if it dies."""
    python = python or os.environ.get("CONTAGENT_VLLM_PYTHON") or sys.executable
    port = _free_port()
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "TOKENIZERS_PARALLELISM": "false",
        # the weight-version and pause endpoints a rollout engine uses (test_engine_versions)
        "VLLM_SERVER_DEV_MODE": "1",
    }  # fmt: skip
    out = log.open("wb")
    proc = subprocess.Popen(
        [python, str(HERE / "serve.py"), *serve_args(model, port), *flags],
        stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    server = VllmServer(proc, port, model, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(1)
    server.stop()
    raise RuntimeError(f"vLLM did not answer /health within {START_TIMEOUT_S:.0f} s")
