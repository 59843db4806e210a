"""Each sample rollout in data/ exports to its expected outcome, and validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, assert_outcome, assert_same_as_generated, export_and_validate
from tools.samples import SCENARIOS, write_samples


def test_committed_samples_match_their_generator(tmp_path: Path) -> None:
    write_samples(tmp_path)
    assert_same_as_generated(
        REPO / "data" / "rollouts", tmp_path, list(SCENARIOS), "python -m tools.samples"
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("samples")
    write_samples(root)
    return export_and_validate(root)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sample_outcome(name: str, exported: dict[str, dict]) -> None:
    assert_outcome(exported[name], SCENARIOS[name][1])
