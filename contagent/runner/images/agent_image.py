"""Task images and the agent layered onto them, built once and cached on each engine.

* The task image: ``docker_image`` of task.toml, or built from
  ``environment/Dockerfile`` (context ``environment/``) and tagged by the
  content hash of ``environment/``.
* The derived image: ``FROM`` the task image, with the agent's files copied from
  its runner image (:class:`contagent.agents.layer.AgentLayer`), tagged by a hash
  of the task image, the runner image, the layer and the owner.

Both carry :data:`LABEL_CACHE` and the owner's label, so ``contagent gc --images``
removes this owner's, and only this owner's. The layer's build steps run with no
network: they only copy and check files.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import time
from typing import Any

import docker
import docker.errors
import requests.exceptions

from contagent.agents.layer import REFUSE, STAGE, AgentLayer
from contagent.errors import ContagentError
from contagent.runner import docker_ops
from contagent.runner.tasks.harbor_task import HarborTask

LABEL_CACHE = "contagent.cache"
TASK_REPO = "contagent-task"
DERIVED_REPO = "contagent-derived"
#: bumped when the derived image's recipe changes, so stale ones are not reused
RECIPE_VERSION = "1"

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class TaskRefused(ContagentError):
    """The task cannot run with this agent: what its image lacks for the agent's runtime,
    or a limit of task.toml the engine cannot apply. Not a fault of the engine's host."""


def _lock(tag: str) -> threading.Lock:
    """One build of a tag at a time in this process (parallel rollouts of one task)."""
    with _locks_guard:
        return _locks.setdefault(tag, threading.Lock())


def _exists(client: docker.DockerClient, tag: str) -> Any | None:
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def _build(client: docker.DockerClient, timeout_s: float, **kwargs: Any) -> list[str]:
    """Run one build; its output lines, or :class:`ContagentError` with the refusal line
    or the builder's error."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    for chunk in client.api.build(rm=True, forcerm=True, decode=True, **kwargs):
        text = str(chunk.get("stream", "")).rstrip()
        if text:
            lines.extend(text.splitlines())
        if "error" in chunk:
            refusal = next((ln for ln in lines if ln.startswith(REFUSE)), None)
            if refusal is not None:
                raise TaskRefused(refusal[len(REFUSE) :].strip())
            raise ContagentError(f"image build failed: {str(chunk['error']).strip()[:300]}")
        if time.monotonic() > deadline:
            raise ContagentError(f"image build ran past its {timeout_s:.0f} s limit")
    return lines


def task_image(client: docker.DockerClient, task: HarborTask, owner: str) -> str:
    """The task's own image on this engine: ``docker_image`` (pulled if absent) or the
    cached build of ``environment/``."""
    if task.docker_image is not None:
        if _exists(client, task.docker_image) is None:
            try:
                client.images.pull(task.docker_image)
            except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
                raise ContagentError(
                    f"docker_image {task.docker_image} is not on this engine and could "
                    f"not be pulled ({str(exc).splitlines()[0][:200]})"
                ) from None
        return task.docker_image
    tag = f"{TASK_REPO}:{task.environment_hash[:32]}"
    with _lock(tag):
        if _exists(client, tag) is None:
            _build(
                client,
                task.build_timeout_s,
                path=str(task.environment_dir),
                dockerfile="Dockerfile",
                tag=tag,
                labels={LABEL_CACHE: "task", docker_ops.LABEL_OWNER: owner},
            )
    return tag


def derived_dockerfile(runner: str, base: str, layer: AgentLayer, labels: dict[str, str]) -> str:
    label_line = " ".join(f'"{k}"="{v}"' for k, v in sorted(labels.items()))
    return "\n".join(
        [
            f"FROM {runner} AS agent",
            f"RUN mkdir -p {STAGE} && {layer.collect}",
            f"FROM {base}",
            f"RUN {layer.check}",
            f"COPY --from=agent {STAGE}/ /",
            "ENV PATH=/opt/contagent/bin:$PATH",
            f"RUN {layer.smoke}",
            f"LABEL {label_line}",
            "",
        ]
    )


def derived_image(
    client: docker.DockerClient,
    task: HarborTask,
    agent: str,
    runner: str | None,
    layer: AgentLayer | None,
    owner: str,
) -> str:
    """The task image with ``agent`` layered on, built once per (task image, agent image)
    on this engine; ``runner`` is None for an agent with nothing to add (the oracle)."""
    if layer is None:
        raise TaskRefused(f"agent {agent} cannot be layered onto a task's own image")
    base = task_image(client, task, owner)
    if runner is None:
        return base
    try:
        base_id = client.images.get(base).id
        runner_id = client.images.get(runner).id
    except docker.errors.ImageNotFound as exc:
        raise ContagentError(f"image not found on this engine: {exc.explanation}") from None
    key = "\n".join([RECIPE_VERSION, base_id, runner_id, repr(layer), owner])
    tag = f"{DERIVED_REPO}:{agent}-{hashlib.sha256(key.encode()).hexdigest()[:24]}"
    labels = {LABEL_CACHE: "derived", docker_ops.LABEL_OWNER: owner, "contagent.agent": agent}
    with _lock(tag):
        if _exists(client, tag) is None:
            dockerfile = derived_dockerfile(runner, base, layer, labels).encode()
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                info = tarfile.TarInfo("Dockerfile")
                info.size = len(dockerfile)
                tar.addfile(info, io.BytesIO(dockerfile))
            buf.seek(0)
            _build(
                client,
                600.0,
                fileobj=buf,
                custom_context=True,
                tag=tag,
                network_mode="none",
            )
    return tag


def check_storage(
    client: docker.DockerClient, image: str, storage_mb: int, labels: dict[str, str]
) -> None:
    """:class:`TaskRefused` naming ``storage_mb`` when this engine cannot limit a container's
    storage (the limit needs overlay2 on xfs with ``pquota``): a container asking for it is
    created and removed, never started."""
    try:
        container = client.containers.create(
            image, command=["true"], storage_opt={"size": f"{storage_mb}M"}, labels=labels
        )
    except docker.errors.APIError as exc:
        text = str(exc.explanation or exc)
        if "storage" not in text.lower():
            raise
        raise TaskRefused(
            f"storage_mb = {storage_mb}: this Docker engine cannot limit a container's "
            f"storage ({text.splitlines()[0][:200]})"
        ) from None
    container.remove(force=True)


def prepare(
    client: docker.DockerClient,
    task: HarborTask,
    agent: str,
    runner: str | None,
    layer: AgentLayer | None,
    owner: str,
    labels: dict[str, str],
) -> str:
    """Everything a rollout of ``task`` with ``agent`` needs from this engine, checked once
    before any rollout: the derived image (built and cached), and the storage limit (a
    container created with ``labels``, never started, removed). Raises
    :class:`TaskRefused` for what no engine of this kind could fix, else ContagentError."""
    image = derived_image(client, task, agent, runner, layer, owner)
    if task.storage_mb is not None:
        check_storage(client, image, task.storage_mb, labels)
    return image


def gc_images(client: docker.DockerClient, owner: str) -> list[str]:
    """Remove this owner's cached task and derived images; their tags."""
    removed: list[str] = []
    images = client.images.list(filters={"label": [f"{docker_ops.LABEL_OWNER}={owner}"]})
    # derived images first: a task image is their base
    images.sort(key=lambda im: (im.labels or {}).get(LABEL_CACHE) != "derived")
    for image in images:
        if (image.labels or {}).get(LABEL_CACHE) not in ("task", "derived"):
            continue
        for tag in image.tags or [image.id]:
            try:
                client.images.remove(tag, force=False, noprune=False)
                removed.append(tag)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # still used by a container: kept
                    raise
    return removed
