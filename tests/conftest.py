from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from contagent.testing.inprocess import agent_script
from contagent.testing.llm_stub import RunningStub, start_stub_in_thread

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Property tests run the same examples on every run and are never timed: a shared 2-core
# machine under load can make one example take seconds, and a test must not fail for that.
settings.register_profile("contagent", deadline=None, derandomize=True)
settings.load_profile("contagent")


# marker -> (variable that enables it, why it is skipped otherwise)
_OPT_IN = {
    "docker": ("CONTAGENT_DOCKER_TESTS", "Docker end-to-end test"),
    "browser": ("CONTAGENT_BROWSER_TESTS", "browser test (scripts/ci-browser.sh)"),
    "ray": ("CONTAGENT_RAY_TESTS", "Ray cluster test (scripts/ci-ray.sh)"),
    "vllm": ("CONTAGENT_VLLM_TESTS", "real vLLM test (scripts/ci-vllm.sh)"),
    "harbor": ("CONTAGENT_HARBOR_TESTS", "Harbor interop test (scripts/ci-harbor.sh)"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, (variable, what) in _OPT_IN.items():
        if os.environ.get(variable) == "1":
            continue
        skip = pytest.mark.skip(reason=f"{what}: set {variable}=1")
        for item in items:
            # get_closest_marker, not keywords: "ray" would match a file name too
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


@pytest.fixture()
def samples(tmp_path: Path) -> Path:
    """A fresh copy of the sample rollouts, built by the same code as data/rollouts."""
    from tools.samples import write_samples

    root = tmp_path / "rollouts"
    write_samples(root)
    return root


@pytest.fixture
def stub() -> Iterator[RunningStub]:
    """The scripted LLM server playing the in-process agent's moves, serving model ``m``
    (the engine tests and the trainers tier)."""
    running = start_stub_in_thread(agent_script, models=["m"])
    try:
        yield running
    finally:
        running.stop()
