"""Helpers shared by the runner tests (fixtures stay in conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_experiment(
    root: Path, name: str, spec: Any, *, scripts: bool = True, raw: str | None = None
) -> Path:
    """An experiment folder; ``raw`` writes experiment.json verbatim instead of ``spec``."""
    exp = root / name
    (exp / "workspace").mkdir(parents=True, exist_ok=True)
    (exp / "experiment.json").write_text(raw if raw is not None else json.dumps(spec))
    if scripts:
        (exp / "setup.sh").write_text("#!/bin/bash\ntrue\n")
        (exp / "evaluate.sh").write_text("#!/bin/bash\ntrue\n")
    return exp
