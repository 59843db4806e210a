"""``contagent build``: the runner images (one per agent), through the docker SDK.

The build context is a temporary copy of the repository's ``docker/`` folder,
plus the CA bundle when one is given (trusted by pip for the install step only,
for builds behind a TLS-intercepting proxy).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker.errors

from contagent.errors import ContagentError
from contagent.runner import docker_ops

DEFAULT_BASE_IMAGE = "python:3.13-slim"


def docker_dir() -> Path:
    """The ``docker/`` folder of the source tree this package runs from."""
    return Path(__file__).resolve().parents[3] / "docker"


@dataclass(frozen=True)
class BuildResult:
    image: str
    image_id: str
    base_image: str
    ca_bundle: Path | None


def build_image(
    tag: str,
    base_image: str = DEFAULT_BASE_IMAGE,
    ca_bundle: Path | None = None,
    context_dir: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    dockerfile: str = "Dockerfile",
) -> BuildResult:
    """Build a runner image from ``context_dir`` (default: the repository's docker/).

    ``dockerfile``: relative to the context; each agent names its own
    (:attr:`contagent.agents.base.Agent.dockerfile`).
    """
    src = context_dir or docker_dir()
    if not (src / dockerfile).is_file():
        raise ContagentError(
            f"{src / dockerfile}: no such Dockerfile (run contagent build from a source checkout)"
        )
    if ca_bundle is not None and not Path(ca_bundle).is_file():
        raise ContagentError(f"--ca-bundle {ca_bundle}: no such file")
    client = docker_ops.connect()
    with tempfile.TemporaryDirectory(prefix="contagent-build-") as tmp:
        ctx = Path(tmp) / "context"
        shutil.copytree(src, ctx, ignore=shutil.ignore_patterns("ca.crt"))
        (ctx / "ca-bundle").mkdir(exist_ok=True)
        if ca_bundle is not None:
            shutil.copyfile(ca_bundle, ctx / "ca-bundle" / "ca.crt")
        try:
            image_id = ""
            for chunk in client.api.build(
                path=str(ctx),
                dockerfile=dockerfile,
                tag=tag,
                buildargs={"BASE_IMAGE": base_image},
                rm=True,
                decode=True,
            ):
                if "error" in chunk:
                    raise ContagentError(f"image build failed: {str(chunk['error']).strip()}")
                line = str(chunk.get("stream", "")).rstrip()
                if line and on_line is not None:
                    on_line(line)
                aux = chunk.get("aux") or {}
                image_id = aux.get("ID", image_id)
        except docker.errors.APIError as exc:
            raise ContagentError(f"image build failed: {exc.explanation or exc}") from None
        finally:
            client.close()
    return BuildResult(image=tag, image_id=image_id, base_image=base_image, ca_bundle=ca_bundle)
