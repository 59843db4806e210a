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
    # the samples drive the model with logit_bias and named tool choices: keep the tokens
    # that constrained in the mask, so that every sampled token is counted
    options = ExportOptions(formats=("tokens", "prime-sft"), filter="all", train_constrained=True)
    export([runs], out, options)
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


def test_the_recording_holds_what_rl_needs(tmp_path: Path) -> None:
    """As a trainer takes it (constrained tokens out of the mask): free text under strict
    tools is trained; the groups' rewards differ; the model's mistake keeps its samples; the
    proxy-only rollouts' rewards came through the control route."""
    out = tmp_path / "out"
    export([RECORDED], out, ExportOptions(formats=("tokens",), filter="all"))
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    records = pq.read_table(out / "tokens" / "data").to_pylist()
    for row in rows.values():
        assert {s["logprobs_mode"] for s in row["tokens"]["sampling"]} == {"processed_logprobs"}
    free = [r for r in records if r["group_id"] == '["tokens_free_text","tiny"]']
    assert len({r["rollout_id"] for r in free}) == 3 and all(any(r["mask"]) for r in free)
    assert len({r["advantage"] for r in free}) == 3
    mistake = rows[_named(rows, "model_mistake")]
    assert mistake["not_ready_kinds"] == ["unknown_tool"]
    assert any(r["rollout_id"] == mistake["rollout_id"] for r in records)
    for rid in (_named(rows, "proxy_only_a"), _named(rows, "proxy_only_b")):
        assert not (RECORDED / rid / "result.json").exists() and rows[rid]["reward"] is not None
    assert {r["group_id"] for r in records if "proxy_only" in r["rollout_id"]} == {'["proxy_only"]'}
