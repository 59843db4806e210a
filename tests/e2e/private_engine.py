"""A Docker engine of the tests' own, to stop and start mid-run without touching the host's.

It has its own data root (kept under /var/cache/contagent, so the image it needs is
loaded once per machine), exec root, pid file and socket, a default bridge of its own, no
iptables rules (the host engine's stay as they are) and an address pool of its own.

``--bridge=none`` is not an option: an engine started with it deletes the host's ``docker0``
interface, and every later container on the host engine's default bridge (``docker build``
steps included) then fails to start.
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
BRIDGE = "ctest0"
BRIDGE_ADDR = "10.214.0.1/24"


def usable() -> str | None:
    """Why this machine cannot run a private engine, or None."""
    if os.geteuid() != 0:
        return "a private Docker engine needs root"
    if shutil.which("dockerd") is None:
        return "no dockerd on PATH"
    if shutil.which("ip") is None:
        return "no ip (iproute2) on PATH for the private engine's bridge"
    return None


def _ensure_bridge() -> None:
    """The private engine's own default bridge, made once per boot."""
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        return
    for cmd in (
        ["ip", "link", "add", "name", BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", BRIDGE_ADDR, "dev", BRIDGE],
        ["ip", "link", "set", BRIDGE, "up"],
    ):
        subprocess.run(cmd, check=True, capture_output=True)


class PrivateEngine:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        self._end_stale()
        _ensure_bridge()
        ROOT.mkdir(parents=True, exist_ok=True)
        # An engine clears the default network it stored last time at start, and deleting it
        # deletes the interface it names: with no stored network it never touches docker0.
        shutil.rmtree(ROOT / "data" / "network", ignore_errors=True)
        log = (ROOT / "dockerd.log").open("ab")
        self.proc = subprocess.Popen(
            ["dockerd", "--data-root", str(ROOT / "data"), "--exec-root", f"/run/{NAME}",
             "--pidfile", str(PIDFILE), "-H", URL, f"--bridge={BRIDGE}", "--iptables=false",
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
