from __future__ import annotations

import os
from pathlib import Path

import pytest

from contagent.export.exporter import ExportOptions, export
from tests.helpers import REPO, builtin_tools_on_vllm


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("CONTAGENT_TRAINER_TESTS") == "1":
        return
    skip = pytest.mark.skip(
        reason="trainer test: pip install -e '.[trainers]' and set CONTAGENT_TRAINER_TESTS=1"
    )
    for item in items:
        if "trainers" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``contagent export data/rollouts --filter all --format prime-sft --format trl``, with
    the built-in-tools sample also as run against vLLM (its namespace flattened into
    functions, a call of one, its web_search left out), which those formats then carry."""
    out = tmp_path_factory.mktemp("export")
    on_vllm = tmp_path_factory.mktemp("on-vllm")
    builtin_tools_on_vllm(on_vllm)
    export(
        [REPO / "data" / "rollouts", on_vllm],
        out,
        ExportOptions(filter="all", formats=("prime-sft", "trl")),
    )
    return out
