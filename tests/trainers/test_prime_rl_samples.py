"""prime-rl's own trainer data path takes the tokens folder as it is.

prime-rl is not on PyPI: its two files at the commit docs/tokens.md names lie unmodified in
the shared folder beside the repository (``CONTAGENT_PRIME_RL``, default
``../shared/prime_rl``), which this puts on ``sys.path``. The recipe is docs/tokens.md's,
and nothing else: ``TrainingSample(**{f: row[f] for f in __struct_fields__ if f in row})``,
then prime-rl's ``prepare_sample`` and ``prepare_batch``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from contagent.export.exporter import ExportOptions, export
from tests.helpers import REPO
from tools.rollouts import assistant, call
from tools.sample_base import TASK
from tools.token_rollouts import TokenRolloutBuilder

pytestmark = pytest.mark.trainers

PRIME_RL = Path(os.environ.get("CONTAGENT_PRIME_RL", REPO.parent / "shared" / "prime_rl"))


@pytest.fixture(scope="module")
def prime_rl() -> Any:
    if not (PRIME_RL / "prime_rl" / "trainer" / "batch.py").is_file():
        pytest.fail(f"no prime-rl files at {PRIME_RL}: set CONTAGENT_PRIME_RL")
    sys.path.insert(0, str(PRIME_RL))
    try:
        from prime_rl.trainer import batch
        from prime_rl.transports.rollouts import types
    finally:
        sys.path.remove(str(PRIME_RL))
    return types.TrainingSample, batch


def _rows(folder: Path) -> list[dict[str, Any]]:
    """The folder's rows as ``datasets`` loads them (it refuses a folder of no rows)."""
    import pyarrow.parquet as pq
    from datasets import load_dataset

    if not pq.read_table(folder / "data").num_rows:
        return []
    return list(load_dataset(str(folder), split="train"))


def _recipe(prime_rl: Any, rows: list[dict[str, Any]]) -> list[Any]:
    training_sample, batch = prime_rl
    samples = [
        training_sample(**{f: row[f] for f in training_sample.__struct_fields__ if f in row})
        for row in rows
    ]
    for sample in samples:
        micro = batch.prepare_sample(sample, seq_len=1 << 20)
        assert len(micro.input_ids) == len(sample.token_ids)
    batches = batch.prepare_batch(
        samples, seq_len=1 << 16, num_train_workers=1, bin_cost=batch.build_bin_cost(None)
    )
    assert sum(len(m.input_ids) for m in batches[0]) >= sum(len(s.token_ids) for s in samples)
    return samples


def _trainable(samples: list[Any]) -> None:
    for sample in samples:
        if any(sample.advantages):
            assert any(sample.mask)
        assert all(t == t and t > 0 for t in sample.temperatures)


def test_the_readme_tour_export_of_data_rollouts_goes_through_prepare_batch(
    prime_rl: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    formats = ("prime-sft", "trl", "tokens")
    export([REPO / "data" / "rollouts"], out, ExportOptions(filter="all", formats=formats))
    rows = _rows(out / "tokens")
    samples = _recipe(prime_rl, rows)
    assert len(samples) == len(rows) > 0
    _trainable(samples)
    # the groups with different rewards give nonzero advantages, on trainable tokens
    moved = [s for s in samples if any(s.advantages)]
    assert moved and all(any(s.mask) for s in moved)
    assert {r["group_id"] for r, s in zip(rows, samples, strict=True) if s in moved} == {
        '["tokens_free_text","tiny"]',
        '["proxy_only"]',
    }
    # the sampling temperature the proxy recorded (--sampling-defaults 0.8, or the client's 1)
    assert {round(t, 6) for s in samples for t in s.temperatures} == {0.8, 1.0}


def _play(b: TokenRolloutBuilder, extra: dict[str, Any] | None = None) -> None:
    b.body_extra = {"temperature": 0.8, **(extra or {})}
    b.step(assistant("Let me look.", call("call_1", "terminal", command="cat secret.txt")))
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant("The secret is hunter2."))


def test_a_group_of_attempts_gives_samples_prime_rl_trains(prime_rl: Any, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for rid, reward in (("task", 1.0), ("task_r1", 0.0), ("task_r2", 0.5)):
        b = TokenRolloutBuilder(rid, TASK)
        _play(b)
        verdict = {"experiment": "task", "model": b.model, "reward": reward}
        b.write(runs, {**verdict, "passed": reward == 1.0, "status": "passed"})
    out = tmp_path / "out"
    export([runs], out, ExportOptions(filter="all", formats=("tokens",)))
    rows = _rows(out / "tokens")
    samples = _recipe(prime_rl, rows)
    assert len(samples) == len(rows) > 0
    _trainable(samples)
    by_rollout = {r["rollout_id"]: r["advantage"] for r in rows}
    assert by_rollout == {"task": 0.5, "task_r1": -0.5, "task_r2": 0.0}


def test_a_sample_with_no_token_to_train_is_context_to_prime_rl(
    prime_rl: Any, tmp_path: Path
) -> None:
    """Every step under ``tool_choice: required``: the export still writes the sample (its
    ``num_sampled`` 0), and prime-rl takes it with no token in its loss mask."""
    runs = tmp_path / "runs"
    for rid, reward in (("task", 1.0), ("task_r1", 0.0)):
        b = TokenRolloutBuilder(rid, TASK)
        _play(b, {"tool_choice": "required"})
        verdict = {"experiment": "task", "model": b.model, "reward": reward}
        b.write(runs, {**verdict, "passed": reward == 1.0, "status": "passed"})
    out = tmp_path / "out"
    export([runs], out, ExportOptions(filter="all", formats=("tokens",)))
    rows = _rows(out / "tokens")
    assert {r["advantage"] for r in rows} == {0.5, -0.5}
    assert all(r["num_sampled"] == 0 and any(r["constrained"]) for r in rows)
    _, batch = prime_rl
    for sample in _recipe(prime_rl, rows):
        micro = batch.prepare_sample(sample, seq_len=1 << 20)
        assert not any(micro.loss_mask) and set(micro.advantages) == {0.0}
