"""A Docker engine of the tests' own, to stop and start mid-run without touching the host's.

It has its own data root (kept under /var/cache/contagent, so the image it needs is
loaded once per machine), exec root, pid file and socket, no default bridge, no iptables
rules (the host engine's stay as they are) and an address pool of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import docker

ROOT = Path(os.environ.get("CONTAGENT_TEST_ENGINE_DIR", "/var/cache/contagent/test-engine"))
NAME = "contagent-test-engine"
SOCKET = f"/run/{NAME}.sock"
URL = f"unix://{SOCKET}"
PIDFILE = Path(f"/run/{NAME}.pid")


def usable() -> str | None:
    """Why this machine cannot run a private engine, or None."""
    if os.geteuid() != 0:
        return "a private Docker engine needs root"
    if shutil.which("dockerd") is None:
        return "no dockerd on PATH"
    return None


class PrivateEngine:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        self._end_stale()
        ROOT.mkdir(parents=True, exist_ok=True)
        log = (ROOT / "dockerd.log").open("ab")
        self.proc = subprocess.Popen(
            ["dockerd", "--data-root", str(ROOT / "data"), "--exec-root", f"/run/{NAME}",
             "--pidfile", str(PIDFILE), "-H", URL, "--bridge=none", "--iptables=false",
             "--ip-masq=false", "--shutdown-timeout", "2",
             "--default-address-pool", "base=10.213.0.0/16,size=24"],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.answers():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"the private engine did not start: see {ROOT / 'dockerd.log'}")

    def answers(self) -> bool:
        try:
            client = docker.DockerClient(base_url=URL, timeout=5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:
            return False

    def stop(self, timeout: float = 60) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout)
        self.proc = None

    def _end_stale(self) -> None:
        """A private engine an earlier, killed test session left running (never another)."""
        try:
            pid = int(PIDFILE.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if b"dockerd" not in cmdline or URL.encode() not in cmdline:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)

    def load(self, host_client: docker.DockerClient, image: str) -> None:
        """Copy ``image`` from the host's engine unless this engine has the same one."""
        want = host_client.images.get(image).id
        client = docker.DockerClient(base_url=URL, timeout=300)
        try:
            try:
                if client.images.get(image).id == want:
                    return
            except docker.errors.ImageNotFound:
                pass
        finally:
            client.close()
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "load", "-q"], stdin=save.stdout, check=True,
            env={**os.environ, "DOCKER_HOST": URL}, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        assert save.wait() == 0
