"""The tokens format on ``data/rollouts/tokens``: rollouts recorded once from a real vLLM."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.rawlog.read import read_exchanges
from contagent.validate.check import validate
from tests.helpers import REPO, read_rows

RECORDED = REPO / "data" / "rollouts" / "tokens"

pytestmark = pytest.mark.skipif(
    not RECORDED.is_dir(), reason="no rollouts recorded from a real vLLM in this tree"
)


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, dict[str, dict], list[dict]]:
    runs = tmp_path / "runs"
    shutil.copytree(RECORDED, runs)
    out = tmp_path / "out"
    export([runs], out, ExportOptions(formats=("tokens", "prime-sft"), filter="all"))
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    return out, rows, pq.read_table(out / "tokens" / "data").to_pylist()


def test_recorded_rollouts_give_sound_samples(
    exported: tuple[Path, dict[str, dict], list[dict]],
) -> None:
    out, rows, records = exported
    report = validate(out / "results.jsonl")
    assert report.ok, report.violations
    assert rows and all(r["tokens"] is not None for r in rows.values())
    for rid, row in rows.items():
        assert row["tokens"]["kinds"] == [], (rid, row["tokens"])
        mine = [r for r in records if r["rollout_id"] == rid]
        assert len(mine) == sum(row["tokens"]["samples"]), rid
        # every kept step's sampled tokens are trained once, with the server's logprobs
        raw = read_exchanges(Path(row["raw_log"]["path"]))
        sampled = sum(
            len(raw.outcomes[s["exchange_index"]]["tokens"]["choices"][0]["token_ids"])
            for s in row["steps"]
        )
        assert sum(r["num_sampled"] for r in mine) == sampled, rid


def _named(rows: dict[str, dict], scenario: str) -> str:
    """The id of the recorded rollout of ``scenario`` (ids may carry a prefix)."""
    (rid,) = [rid for rid in rows if rid.endswith(scenario)]
    return rid


def test_a_prefix_keeping_template_gives_a_multi_step_sample(
    exported: tuple[Path, dict[str, dict], list[dict]],
) -> None:
    _, rows, records = exported
    rid = _named(rows, "prefix_kept")
    kept = [r for r in records if r["rollout_id"] == rid]
    assert [r["num_steps"] for r in kept] == [len(rows[rid]["steps"])]
    assert len(rows[rid]["steps"]) >= 2
    # Qwen3's own template re-renders earlier turns: its prompts break the prefix
    assert rows[_named(rows, "default_template")]["tokens"]["breaks"]
