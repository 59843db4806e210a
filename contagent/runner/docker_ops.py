"""Docker engine operations of the runner: networks, containers, labels, clean-up.

Everything created here carries the labels :data:`LABEL_RUN`, :data:`LABEL_OWNER`
and :data:`LABEL_ROLLOUT`, so that a rollout's leftovers can always be found and
removed, and ``contagent gc`` never touches another owner's objects.
"""

from __future__ import annotations

import getpass
import io
import logging
import os
import re
import socket
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from contagent.errors import ContagentError

log = logging.getLogger(__name__)

LABEL_RUN = "contagent.run-id"
LABEL_OWNER = "contagent.owner"
LABEL_ROLLOUT = "contagent.rollout"
LABEL_ROLE = "contagent.role"

#: ``stop_condition`` of a rollout that ended because the Docker engine stopped answering
ENGINE_STOP = "docker_engine"

#: Set by docker/Dockerfile; images without it lack the venv and entrypoint the runner needs.
RUNNER_IMAGE_LABEL = "contagent.runner-image"


class EngineLost(ContagentError):
    """The Docker engine stopped answering mid-run (stopped, restarting, crashed)."""

    exit_code = 1


def engine_gone(exc: BaseException) -> str | None:
    """Why ``exc`` means the engine is not answering any more, or None when it does not.

    A refused or aborted connection to the engine's socket is the engine gone; an HTTP
    error answer (an ``APIError``) is the engine answering.
    """
    if isinstance(exc, EngineLost):
        return str(exc)
    if isinstance(exc, requests.exceptions.ConnectionError) and "timed out" not in str(exc):
        detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return f"the Docker engine stopped answering ({detail})"
    return None


def _answers(client: Any) -> bool:
    try:
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False
    return True


def default_owner() -> str:
    """Who owns the objects a run creates: ``CONTAGENT_OWNER`` or ``user-uid@host``."""
    env = os.environ.get("CONTAGENT_OWNER")
    if env:
        return env
    return f"{getpass.getuser()}-{os.getuid()}@{socket.gethostname()}"


def connect() -> docker.DockerClient:
    """A client for the engine named by the environment (DOCKER_HOST or the local socket)."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise ContagentError(f"cannot reach the Docker engine: {exc}") from None
    return client


def check_runner_image(client: docker.DockerClient, image: str, agent: str) -> None:
    """Raise :class:`ContagentError` unless ``image``, the one ``agent`` runs in, is a
    contagent runner image on this engine."""
    build = f"contagent build --agent {agent}"
    try:
        found = client.images.get(image)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise ContagentError(
            f"runner image {image} of {agent} not found ({type(exc).__name__}); build it with "
            f"`{build}`, or name another with --image {agent}=NAME"
        ) from None
    if (found.labels or {}).get(RUNNER_IMAGE_LABEL) != "1":
        raise ContagentError(
            f"--image {agent}={image} is not a contagent runner image "
            f"(no {RUNNER_IMAGE_LABEL} label); build one with `{build}`"
        )


def make_tar(entries: Iterable[tuple[str, Path | bytes, int]]) -> bytes:
    """A tar archive of ``(name inside the archive, file/dir or bytes, mode)`` entries.

    Directories are added recursively; ownership is root's, as the container runs as root.
    """
    buf = io.BytesIO()

    def _reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, source, mode in entries:
            if isinstance(source, bytes):
                info = tarfile.TarInfo(name)
                info.size = len(source)
                info.mode = mode
                info.mtime = int(time.time())
                tar.addfile(_reset(info), io.BytesIO(source))
            else:
                tar.add(str(source), arcname=name, recursive=True, filter=_reset)
    return buf.getvalue()


def extract_tar(data: Iterable[bytes], dest: Path) -> None:
    """Unpack a ``get_archive`` stream into ``dest`` (refusing names that would leave it)."""
    buf = io.BytesIO(b"".join(data))
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buf, mode="r") as tar:
        tar.extractall(dest, filter="data")


@dataclass(frozen=True)
class RolloutNetwork:
    name: str
    id: str
    gateway: str
    subnet: str | None = None  # the proxy serves only clients from here


def create_network(
    client: docker.DockerClient, name: str, labels: dict[str, str]
) -> RolloutNetwork:
    """An internal bridge: its containers reach each other and the host's bridge address, nothing else."""
    net = client.networks.create(
        name, driver="bridge", internal=True, labels=labels, check_duplicate=True
    )
    net.reload()
    configs = (net.attrs.get("IPAM") or {}).get("Config") or []
    gateway = next((c.get("Gateway") for c in configs if c.get("Gateway")), None)
    if not gateway:
        net.remove()
        raise ContagentError(
            f"network {name} has no gateway address on the host; the proxy cannot be reached from it"
        )
    subnet = next((c.get("Subnet") for c in configs if c.get("Subnet")), None)
    return RolloutNetwork(name=name, id=net.id or "", gateway=gateway.split("/")[0], subnet=subnet)


def start_service(
    client: docker.DockerClient,
    *,
    name: str,
    alias: str,
    image: str,
    network: str,
    environment: dict[str, str],
    entrypoint: Path | None,
    labels: dict[str, str],
) -> Any:
    """Start one service container, reachable on ``network`` as ``alias``."""
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        try:
            client.images.pull(image)
        except docker.errors.APIError as exc:
            reason = str(exc.explanation or exc).splitlines()[0]
            raise ContagentError(
                f"service {alias!r}: image {image} is not available locally and could not be pulled ({reason})"
            ) from None
    kwargs: dict[str, Any] = {}
    if entrypoint is not None:
        kwargs["volumes"] = {
            str(entrypoint.resolve()): {"bind": "/contagent/entrypoint.sh", "mode": "ro"}
        }
        kwargs["entrypoint"] = ["sh", "/contagent/entrypoint.sh"]
        kwargs["command"] = []
    return client.containers.run(
        image,
        name=name,
        hostname=alias,
        detach=True,
        network=network,
        networking_config={network: client.api.create_endpoint_config(aliases=[alias])},
        environment=environment,
        labels=labels,
        init=True,
        **kwargs,
    )


WaitResult = tuple[int | None, bool]


def wait_container(
    container: Any, deadline: float, cancelled: Callable[[], bool], poll_s: float = 1.0
) -> WaitResult:
    """Wait until the container exits, the deadline passes, or ``cancelled()``.

    Returns ``(exit code or None, timed_out)``; the container is killed when it
    is still running at the deadline or on cancel. Raises :class:`EngineLost` when the
    engine stops answering (a wait cut short is otherwise just polled again).
    """
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or cancelled():
            _kill(container)
            code = _exit_code(container)
            return code, remaining <= 0
        try:
            status = container.wait(timeout=max(0.1, min(poll_s, remaining)))
            return int(status.get("StatusCode", -1)), False
        except requests.exceptions.ReadTimeout:
            continue
        except requests.exceptions.ConnectionError as exc:
            if _answers(container.client):
                continue
            raise EngineLost(engine_gone(exc) or "the Docker engine stopped answering") from exc


def _kill(container: Any) -> None:
    try:
        container.kill()
    except docker.errors.APIError:
        pass  # already stopped
    try:
        container.wait(timeout=30)
    except (docker.errors.APIError, requests.exceptions.RequestException):
        pass


def run_seconds(container: Any) -> float | None:
    """How long the container ran, from the engine's StartedAt/FinishedAt."""
    from datetime import datetime

    try:
        container.reload()
        state = container.attrs["State"]
        # The engine gives nanoseconds; fromisoformat takes at most microseconds.
        start, end = (
            datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", state[k]).replace("Z", "+00:00"))
            for k in ("StartedAt", "FinishedAt")
        )
    except (docker.errors.APIError, KeyError, ValueError):
        return None
    seconds = (end - start).total_seconds()
    return seconds if seconds >= 0 else None


def _exit_code(container: Any) -> int | None:
    try:
        container.reload()
        return int(container.attrs["State"]["ExitCode"])
    except (docker.errors.APIError, KeyError, ValueError):
        return None


@dataclass(frozen=True)
class Removed:
    containers: list[str]
    networks: list[str]


def remove_labelled(client: docker.DockerClient, filters: dict[str, str]) -> Removed:
    """Force-remove every container, then every network, carrying all the given labels."""
    label_filter = [f"{k}={v}" for k, v in filters.items()]
    containers: list[str] = []
    networks: list[str] = []
    for c in client.containers.list(all=True, filters={"label": label_filter}):
        try:
            c.remove(force=True, v=True)
            containers.append(c.name)
        except docker.errors.NotFound:
            pass
    for n in client.networks.list(filters={"label": label_filter}):
        try:
            n.remove()
            networks.append(n.name or "")
        except docker.errors.NotFound:
            pass
    return Removed(containers=containers, networks=networks)


def leftovers(client: docker.DockerClient, filters: dict[str, str]) -> list[str]:
    """Names of containers and networks carrying all the given labels."""
    label_filter = [f"{k}={v}" for k, v in filters.items()]
    names = [
        f"container {c.name}"
        for c in client.containers.list(all=True, filters={"label": label_filter})
    ]
    names += [f"network {n.name}" for n in client.networks.list(filters={"label": label_filter})]
    return names
