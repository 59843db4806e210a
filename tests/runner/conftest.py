from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    d = tmp_path / "skills"
    (d / "net").mkdir(parents=True)
    (d / "net" / "SKILL.md").write_text("---\nname: net\ndescription: d\n---\nbody\n")
    return d
