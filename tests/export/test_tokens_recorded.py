"""The tokens format on ``data/rollouts/tokens``: rollouts recorded once from a real vLLM."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.rawlog.read import read_exchanges
from contagent.validate.check import validate
from tests.helpers import REPO, read_rows
from tools.token_rollouts import SERVER_SAMPLING, recorded_sampling

RECORDED = REPO / "data" / "rollouts" / "tokens"

pytestmark = pytest.mark.skipif(
    not RECORDED.is_dir(), reason="no rollouts recorded from a real vLLM in this tree"
)


def _recorded_sampling(runs: Path) -> bool:
    """Do the recorded requests say what they were sampled at (a re-recording does)?"""
    return all(
        req.get("sampling") is not None and "logprobs_mode" in (req.get("server") or {})
        for log in runs.glob("*/exchanges.jsonl")
        for req in read_exchanges(log).requests.values()
    )


def _as_recorded_now(runs: Path) -> None:
    """Give requests recorded before the sampling was recorded what the proxy records now
    against that server: vLLM's default temperature 1 (the tiny model's generation config
    sets none) in the processed logprobs mode. The tokens themselves are untouched."""
    for log in runs.glob("*/exchanges.jsonl"):
        lines = []
        for line in log.read_bytes().splitlines():
            rec = orjson.loads(line)
            if rec.get("type") == "request" and rec.get("sampling") is None:
                rec["sampling"] = recorded_sampling(rec["body"], SERVER_SAMPLING)
                rec["server"] = {**rec["server"], "logprobs_mode": "processed_logprobs"}
            lines.append(orjson.dumps(rec))
        log.write_bytes(b"\n".join(lines) + b"\n")


def test_requests_recorded_without_their_sampling_give_no_samples(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(RECORDED, runs)
    if _recorded_sampling(runs):
        pytest.skip("the bundled rollouts record their sampling")
    export([runs], tmp_path / "out", ExportOptions(formats=("tokens",), filter="all"))
    for row in read_rows(tmp_path / "out" / "results.jsonl"):
        assert "unknown_sampling" in row["tokens"]["kinds"], row["rollout_id"]
        assert "--sampling-defaults" in row["tokens"]["reason"]


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, dict[str, dict], list[dict]]:
    runs = tmp_path / "runs"
    shutil.copytree(RECORDED, runs)
    if not _recorded_sampling(runs):
        _as_recorded_now(runs)
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
