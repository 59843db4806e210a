"""What runs left in Docker, and whose driver is still alive.

Every object a run creates carries its driver's identity: the host, the process id and
that process's start time (:data:`LABEL_HOST`, :data:`LABEL_PID`, :data:`LABEL_STARTED`).
A run whose driver died without cleaning up (SIGKILL, the OOM killer, a reboot) is then
told apart from a live one: on the same host, a driver is alive only while a process
with that id *and* that start time exists, so a reused process id is not mistaken for
the run. A driver on another host cannot be checked from here, and objects without the
labels cannot be checked at all: both are listed, never removed automatically.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

import docker
import psutil

from contagent.runner import docker_ops

LABEL_HOST = "contagent.host"
LABEL_PID = "contagent.pid"
LABEL_STARTED = "contagent.pid-started"
UNKNOWN = "unknown"


def _start_time(pid: int) -> str | None:
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except (psutil.Error, OSError):
        return None


@dataclass(frozen=True)
class Driver:
    """The process that runs a ``contagent run``."""

    host: str
    pid: int
    started: str

    @classmethod
    def this_process(cls) -> Driver:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, _start_time(pid) or UNKNOWN)

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> Driver | None:
        try:
            return cls(labels[LABEL_HOST], int(labels[LABEL_PID]), labels[LABEL_STARTED])
        except (KeyError, ValueError):
            return None

    def labels(self) -> dict[str, str]:
        return {LABEL_HOST: self.host, LABEL_PID: str(self.pid), LABEL_STARTED: self.started}

    def alive(self) -> bool:
        """Whether this driver still runs (only meaningful on its own host); a driver whose
        start time could not be read counts as alive: it is never removed unasked."""
        return self.started == UNKNOWN or _start_time(self.pid) == self.started


@dataclass
class RunLeftovers:
    run_id: str
    driver: Driver | None
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)

    def what(self) -> str:
        return _count(len(self.containers), len(self.networks))


def _count(containers: int, networks: int) -> str:
    return (
        f"{containers} container{'s' * (containers != 1)}, "
        f"{networks} network{'s' * (networks != 1)}"
    )


def by_run(client: docker.DockerClient, owner: str) -> list[RunLeftovers]:
    """Every container and network of ``owner``, grouped by run, sorted by run id."""
    label = [f"{docker_ops.LABEL_OWNER}={owner}"]
    runs: dict[str, RunLeftovers] = {}

    def entry(labels: dict[str, str]) -> RunLeftovers:
        rid = labels.get(docker_ops.LABEL_RUN, "")
        found = runs.get(rid)
        if found is None:
            found = runs[rid] = RunLeftovers(rid, Driver.from_labels(labels))
        return found

    for c in client.containers.list(all=True, filters={"label": label}):
        entry(c.labels or {}).containers.append(c.name or "")
    for n in client.networks.list(filters={"label": label}):
        entry(n.attrs.get("Labels") or {}).networks.append(n.name or "")
    return [runs[k] for k in sorted(runs)]


@dataclass
class Sweep:
    """What :func:`sweep` did, one line per run worth telling."""

    removed: list[docker_ops.Removed] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)  # live runs, left alone

    @property
    def containers(self) -> int:
        return sum(len(r.containers) for r in self.removed)

    @property
    def networks(self) -> int:
        return sum(len(r.networks) for r in self.removed)


def sweep(client: docker.DockerClient, owner: str, me: Driver, *, tell_live: bool = False) -> Sweep:
    """Remove the leftovers of ``owner``'s runs whose driver died on this host.

    Live runs and other owners' objects are never touched; runs of another host, or
    without driver labels, are listed with the command that removes them. With
    ``tell_live`` the live runs spared are said too (``contagent gc``).
    """
    done = Sweep()
    for run in by_run(client, owner):
        d, rid = run.driver, run.run_id
        if d is None:
            done.lines.append(
                f"run {rid}: {run.what()} without driver labels, not removed "
                f"(`contagent gc --run-id {rid}` removes them)"
            )
        elif d.host != me.host:
            done.lines.append(
                f"run {rid}: {run.what()} from host {d.host}, not removed from here "
                f"(on {d.host}: `contagent gc --run-id {rid}`)"
            )
        elif d == me or d.alive():
            done.spared.append(rid)
            if tell_live:
                done.lines.append(f"spared live run {rid} (pid {d.pid}): {run.what()}")
        else:
            gone = docker_ops.remove_labelled(
                client, {docker_ops.LABEL_OWNER: owner, docker_ops.LABEL_RUN: rid}
            )
            done.removed.append(gone)
            done.lines.append(
                f"removed leftovers of run {rid}, whose driver (pid {d.pid} on {d.host}) "
                f"is gone: {_count(len(gone.containers), len(gone.networks))}"
            )
    return done


def left_by_run(run_id: str, timeout_s: float = 10.0) -> list[str] | None:
    """Names of what run ``run_id`` still has in this host's engine; None if it cannot tell."""
    try:
        client = docker.from_env(timeout=max(1, int(timeout_s)))
    except docker.errors.DockerException:
        return None
    try:
        return docker_ops.leftovers(client, {docker_ops.LABEL_RUN: run_id})
    except Exception:  # the engine gone, or the call timed out: nothing to tell
        return None
    finally:
        client.close()


def describe(left: list[str] | None, run_id: str) -> str:
    """One line on what a run leaves behind, with the command that removes it."""
    if left is None:
        return (
            "cannot tell what the run left in Docker (the engine is not answering): "
            f"`contagent gc --run-id {run_id}` removes it once the engine is back"
        )
    if not left:
        return "nothing of the run is left in Docker"
    containers = [n.split(" ", 1)[1] for n in left if n.startswith("container ")]
    networks = [n.split(" ", 1)[1] for n in left if n.startswith("network ")]
    names = ", ".join([*containers, *networks][:4]) + (", ..." if len(left) > 4 else "")
    return (
        f"left in Docker: {_count(len(containers), len(networks))} ({names}); "
        f"`contagent gc --run-id {run_id}` removes them"
    )


def gc(owner: str, run_id: str | None = None) -> Sweep:
    """``contagent gc``: with ``run_id`` remove exactly that run's objects of ``owner``;
    without, sweep ``owner``'s runs (dead drivers' leftovers go, live runs are spared)."""
    client = docker_ops.connect()
    try:
        if run_id:
            done = Sweep()
            done.removed.append(
                docker_ops.remove_labelled(
                    client, {docker_ops.LABEL_OWNER: owner, docker_ops.LABEL_RUN: run_id}
                )
            )
            return done
        return sweep(client, owner, Driver.this_process(), tell_live=True)
    finally:
        client.close()
