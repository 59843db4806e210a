from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contagent.testing.inprocess import agent_script
from contagent.testing.llm_stub import RunningStub, start_stub_in_thread
from tests.runner.helpers import write_experiment


@pytest.fixture
def stub() -> Iterator[RunningStub]:
    running = start_stub_in_thread(agent_script, models=["m"])
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    """Three seed experiments, ``a``, ``b`` and ``c``."""
    for name in ("a", "b", "c"):
        write_experiment(tmp_path / "exps", name, {"task": f"task {name}"})
    return tmp_path / "exps"
