"""``contagent gc`` and ``contagent build``: the Docker engine's side of running."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from contagent.agents import DEFAULT_AGENT
from contagent.cli._common import console, fail, run_guarded


def _gc(
    run_id: Annotated[
        str | None,
        typer.Option(
            help="Only this run's leftovers (default: every run of yours whose driver is gone)."
        ),
    ] = None,
    owner: Annotated[
        str | None,
        typer.Option(help="Owner label to clean (default: you, as `contagent run` labels it)."),
    ] = None,
    images: Annotated[
        bool,
        typer.Option(
            "--images",
            help="Also remove your cached Harbor task images and agent-derived images "
            "(default: off, containers and networks only).",
        ),
    ] = False,
) -> None:
    """Remove containers and networks left by your runs (never another owner's).

    Without --run-id only runs whose driver process is gone from this host are cleaned;
    live runs are spared and said, runs of other hosts listed. --run-id removes exactly
    that run. --images also removes your cached Harbor task and agent-derived images."""
    from contagent.runner import docker_ops
    from contagent.runner.stopping import leftovers

    who = owner or docker_ops.default_owner()
    done = run_guarded(lambda: leftovers.gc(who, run_id))
    for line in done.lines:
        console.print(Text(line), soft_wrap=True)
    console.print(f"removed {done.containers} containers, {done.networks} networks")
    if images:
        from contagent.runner.images.agent_image import gc_images

        tags = run_guarded(lambda: gc_images(docker_ops.connect(), who))
        console.print(f"removed {len(tags)} cached images")


def _build(
    agent: Annotated[
        list[str] | None,
        typer.Option(help=f"Build the image of this agent (repeatable; default {DEFAULT_AGENT})."),
    ] = None,
    tag: Annotated[
        str | None,
        typer.Option(help="Image name (one agent only; default: the agent's own image name)."),
    ] = None,
    base_image: Annotated[
        str, typer.Option(help="Base image with Python 3.12+.")
    ] = "python:3.13-slim",
    ca_bundle: Annotated[
        Path | None,
        typer.Option(
            help="CA bundle pip trusts during the build (TLS-intercepting proxies); "
            "default: the base image's own store."
        ),
    ] = None,
) -> None:
    """Build the runner image of each chosen agent (its pinned agent on the base image).

    On a Ray cluster every node running rollouts needs the images under the names the run
    uses: build them on each node, or build once, tag with your registry's name
    (--tag REGISTRY/contagent-runner:TAG, one --agent at a time), push, pull on each node
    and pass that name to `contagent run` as --image AGENT=NAME.
    """
    from contagent.agents import get_agent
    from contagent.runner.images.build import build_image

    names = agent or [DEFAULT_AGENT]
    if tag is not None and len(names) > 1:
        fail("--tag names one image: give one --agent with it")
    specs = run_guarded(lambda: [get_agent(n) for n in names])
    for name, spec in zip(names, specs, strict=True):
        if not spec.image:
            fail(f"{name} has no runner image to build: it runs with what the task image has")
        result = run_guarded(
            functools.partial(
                build_image,
                tag or spec.image,
                base_image,
                ca_bundle,
                on_line=lambda line: console.print(line, markup=False, highlight=False),
                dockerfile=spec.dockerfile,
            )
        )
        console.print(
            f"built {result.image} ({result.image_id[:19]}) for {name} from {result.base_image}"
        )


def register(app: typer.Typer) -> None:
    app.command("gc")(_gc)
    app.command("build")(_build)
