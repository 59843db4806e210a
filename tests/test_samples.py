"""Each sample rollout in data/ exports to its expected outcome, and validates."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from contagent.testing.samples import SCENARIOS, write_samples
from tests.conftest import REPO, assert_same_as_generated, export_and_validate


def test_committed_samples_match_their_generator(tmp_path: Path) -> None:
    write_samples(tmp_path)
    assert_same_as_generated(
        REPO / "data" / "rollouts", tmp_path, list(SCENARIOS), "python -m contagent.testing.samples"
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("samples")
    write_samples(root)
    return export_and_validate(root)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sample_outcome(name: str, exported: dict[str, dict]) -> None:
    expected = SCENARIOS[name][1]
    row = exported[name]
    assert row["training_ready"] is expected.training_ready, row["training_ready_reason"]
    assert dict(Counter(e["reason"] for e in row["excluded"])) == expected.excluded
    assert row["branches"] == expected.branches
    assert len(row["repairs"]) == expected.repairs
    assert row["truncated"] is expected.truncated
    assert bool(row["not_ready_kinds"]) is not expected.training_ready
    if expected.kinds:
        assert tuple(row["not_ready_kinds"]) == expected.kinds, row["training_ready_reason"]
    if expected.reason:
        assert expected.reason in row["training_ready_reason"]
    else:
        assert row["training_ready_reason"] is None
