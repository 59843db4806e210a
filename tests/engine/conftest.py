from __future__ import annotations

from pathlib import Path

import pytest

from tests.runner.helpers import write_experiment


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    """Three seed experiments, ``a``, ``b`` and ``c``."""
    for name in ("a", "b", "c"):
        write_experiment(tmp_path / "exps", name, {"task": f"task {name}"})
    return tmp_path / "exps"
