"""Helpers shared by the e2e tests (fixtures stay in conftest.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from contagent.testing.llm_stub import (
    RunningStub,
    StubRequest,
)
from contagent.testing.players import FINISH, SECRET, terminal, tool_outputs
from contagent.testing.players import openhands_writing as secret_player

__all__ = ["FINISH", "SECRET", "secret_player", "terminal", "tool_outputs"]


REPO = Path(__file__).resolve().parents[2]
RUNNER_IMAGE = os.environ.get("CONTAGENT_RUNNER_IMAGE", "contagent-runner:latest")
BASE_IMAGE = os.environ.get("CONTAGENT_BASE_IMAGE", "contagent-base:trixie")


#: the model name the stubs list on GET /v1/models, and the runs ask for
MODEL = "stub-model"


def chat_requests(stub: RunningStub) -> list[StubRequest]:
    """What the agent asked the model (without the runner's GET /v1/models checks)."""
    return [r for r in stub.requests if r.method == "POST"]


def copy_experiment(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(REPO / "experiments" / name, target)
    return target
