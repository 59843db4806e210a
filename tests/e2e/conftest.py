"""Docker end-to-end fixtures: the real engine, the real runner image, the real OpenHands agent.

The only stand-in is the LLM: a scripted OpenAI-compatible server on loopback,
reached by the recording proxy (on the host), never by the containers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contagent.runner import docker_ops
from contagent.runner.config import LlmOptions, RunConfig
from contagent.runner.run import run_experiments
from contagent.runner.summary import RunSummary
from contagent.testing.llm_stub import (
    RunningStub,
    Script,
    start_stub_in_thread,
)
from tests.e2e.helpers import BASE_IMAGE, MODEL, REPO, RUNNER_IMAGE


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    client = docker_ops.connect()
    for image in (RUNNER_IMAGE, BASE_IMAGE):
        try:
            client.images.get(image)
        except Exception:
            pytest.fail(f"image {image} missing: run scripts/build-images.sh (what .ci/run does)")
    yield client
    client.close()


@pytest.fixture
def run_id(docker_client: Any) -> Iterator[str]:
    """A fresh run id; afterwards no container or network of that run may be left."""
    rid = f"t-{uuid.uuid4().hex[:10]}"
    yield rid
    left = docker_ops.leftovers(docker_client, {docker_ops.LABEL_RUN: rid})
    docker_ops.remove_labelled(docker_client, {docker_ops.LABEL_RUN: rid})
    assert left == [], f"run {rid} left {left}"


@pytest.fixture
def owner() -> str:
    return f"contagent-tests-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def stub_factory() -> Iterator[Callable[..., RunningStub]]:
    """Start stand-ins (keyword arguments: :func:`start_stub_in_thread`'s); stopped after."""
    started: list[RunningStub] = []

    def make(script: Script, **options: Any) -> RunningStub:
        stub = start_stub_in_thread(script, host="127.0.0.1", models=[MODEL], **options)
        started.append(stub)
        return stub

    yield make
    for stub in started:
        stub.stop()


@pytest.fixture
def run(tmp_path: Path, run_id: str, owner: str) -> Callable[..., RunSummary]:
    """Run experiments through the library with test defaults; keyword arguments override RunConfig."""

    def go(stub: RunningStub, experiments_dir: Path | None = None, **overrides: Any) -> RunSummary:
        llm = overrides.pop("llm", LlmOptions(served_model_name=MODEL, temperature=0.3))
        config = RunConfig(
            experiments_dir=experiments_dir or REPO / "experiments",
            log_dir=tmp_path / "logs",
            skills_dir=REPO / "skills",
            upstream_url=stub.url,
            llm=llm,
            images={"openhands": RUNNER_IMAGE},
            timeout_s=300,
            max_iterations=10,
            run_id=run_id,
            owner=owner,
        )
        return run_experiments(replace(config, **overrides))

    return go
