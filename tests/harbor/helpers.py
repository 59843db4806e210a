"""Helpers of the Harbor task tests: the fixture folder, a minimal task writer."""

from __future__ import annotations

from pathlib import Path

#: Harbor task fixtures, built on the offline base image (no registry needed)
TASKS = Path(__file__).resolve().parent / "tasks"


def write_task(root: Path, toml: str) -> Path:
    """A minimal valid Harbor task at ``root`` with ``toml`` as its task.toml."""
    (root / "tests").mkdir(parents=True)
    (root / "environment").mkdir()
    (root / "task.toml").write_text(
        '[environment]\ndocker_image = "base:1"\n' if not toml else toml
    )
    (root / "instruction.md").write_text("Do it.\n")
    (root / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (root / "environment" / "Dockerfile").write_text("FROM contagent-base:trixie\n")
    return root
