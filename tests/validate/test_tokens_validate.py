"""validate checks the tokens folder: every record rebuilt from the raw log and compared."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import contagent.export.formats.tokens_format as fmt
from contagent.export.exporter import ExportOptions, export
from contagent.export.formats.rollout_data import RolloutData
from contagent.export.formats.tokens_format import sample_record
from contagent.export.formats.version import SCHEMA_VERSION, VERSION_KEY
from contagent.rawlog.read import read_exchanges
from contagent.rules import token_samples as rules
from contagent.rules.groups import GroupFacts
from contagent.validate.check import validate
from contagent.validate.token_invariants import sample_problems
from tests.helpers import REPO, read_rows, write_rows
from tools.token_samples import build_token_rollouts


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    build_token_rollouts(runs)
    out = tmp_path / "out"
    export([runs], out, ExportOptions(formats=("tokens",), filter="all"))
    return out


def _shard(out: Path) -> Path:
    (shard,) = (out / "tokens" / "data").glob("*.parquet")
    return shard


def _rewrite(out: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    shard = _shard(out)
    table = pq.read_table(shard)
    records = table.to_pylist()
    change(records)
    pq.write_table(pa.Table.from_pylist(records, schema=table.schema), shard)


def _reasons(out: Path) -> list[str]:
    return [v.reason for v in validate(out / "results.jsonl").violations]


def _forked(records: list[dict[str, Any]], branch: int = 1) -> dict[str, Any]:
    return next(r for r in records if r["rollout_id"] == "forked" and r["branch"] == branch)


def _broken(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["rollout_id"] == "qwen3_breaks"]


def test_a_sound_tokens_export_is_healthy(exported: Path) -> None:
    report = validate(exported / "results.jsonl")
    assert report.ok, report.violations
    assert report.parquet_rows == pq.read_metadata(_shard(exported)).num_rows


def _bump_token(records: list[dict[str, Any]]) -> None:
    _forked(records)["token_ids"][3] += 1


def _shift_by_one(records: list[dict[str, Any]]) -> None:
    rec = _forked(records, 0)
    rec["token_ids"] = rec["token_ids"][1:] + rec["token_ids"][:1]


def _flip_mask(records: list[dict[str, Any]]) -> None:
    rec = _forked(records)
    rec["mask"] = [not m for m in rec["mask"]]


def _train_shared_step_twice(records: list[dict[str, Any]]) -> None:
    rec = _forked(records)
    rec["mask"] = [True] * len(rec["mask"])


def _change_logprob(records: list[dict[str, Any]]) -> None:
    rec = _forked(records)
    rec["logprobs"][rec["mask"].index(True)] -= 0.5


def _change_temperature(records: list[dict[str, Any]]) -> None:
    _forked(records)["temperatures"][0] = 0.5


def _nan_temperature(records: list[dict[str, Any]]) -> None:
    _forked(records)["temperatures"][0] = float("nan")


def _change_advantages(records: list[dict[str, Any]]) -> None:
    rec = _forked(records, 0)
    rec["advantages"][rec["mask"].index(True)] += 0.25


def _column(column: str, value: Any, rid: str = "forked") -> Callable[[list[dict[str, Any]]], None]:
    def change(records: list[dict[str, Any]]) -> None:
        next(r for r in records if r["rollout_id"] == rid)[column] = value

    change.__name__ = f"_set_{column}"
    return change


def _train_constrained(records: list[dict[str, Any]]) -> None:
    rec = next(r for r in records if r["rollout_id"] == "constrained_step")
    rec["mask"] = [m or c for m, c in zip(rec["mask"], rec["constrained"], strict=True)]


def _unmark_constrained(records: list[dict[str, Any]]) -> None:
    rec = next(r for r in records if r["rollout_id"] == "constrained_step")
    rec["constrained"] = [False] * len(rec["constrained"])


def _renumber_sample(records: list[dict[str, Any]]) -> None:
    _broken(records)[1]["sample"] = 5


def _drop_sample(records: list[dict[str, Any]]) -> None:
    records.remove(_broken(records)[1])


def _duplicate_sample(records: list[dict[str, Any]]) -> None:
    records.append(dict(_broken(records)[0]))


def _merge_samples(records: list[dict[str, Any]]) -> None:
    """Two samples spliced into one across a prefix break: what the format never does."""
    first, second = _broken(records)[:2]
    for column in ("token_ids", "mask", "logprobs", "temperatures", "constrained"):
        second[column] = first[column] + second[column]
    second["num_tokens"] = len(second["token_ids"])
    second["num_sampled"] = sum(second["mask"])
    records.remove(first)


def _foreign_rollout(records: list[dict[str, Any]]) -> None:
    records.append({**_forked(records), "rollout_id": "no_tokens"})


def _wrong_reward(records: list[dict[str, Any]]) -> None:
    _forked(records)["reward"] = 0.5


def _claim_versions(records: list[dict[str, Any]]) -> None:
    """Versions on a sample whose raw log records none."""
    rec = _forked(records)
    rec["policy_versions"] = [0] * len(rec["token_ids"])


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_bump_token, "token_ids differs"),
        (_shift_by_one, "token_ids differs"),
        (_flip_mask, "mask differs"),
        (_train_shared_step_twice, "mask differs"),
        (_change_logprob, "logprobs differs"),
        (_change_temperature, "temperatures differs"),
        (_nan_temperature, "a temperature is NaN"),
        (_change_advantages, "advantages differs"),
        (_change_advantages, "advantages are not the rollout's advantage"),
        (_column("advantage", 0.75), "advantage differs"),
        (_column("group_id", '["other","tiny"]'), "group_id differs"),
        (_column("group_size", 2), "group_size differs"),
        (_column("group_complete", False), "group_complete differs"),
        (_column("sampling_modified", True), "sampling_modified differs"),
        (_column("logprobs_mode", "raw_logprobs"), "logprobs_mode differs"),
        (_column("not_ready_kinds", ["unknown_tool"]), "not_ready_kinds differs"),
        (_train_constrained, "mask differs"),
        (_train_constrained, "less the constrained"),
        (_unmark_constrained, "constrained differs"),
        (_renumber_sample, "no such record"),
        (_drop_sample, "lacks branch 0 sample 1"),
        (_duplicate_sample, "sample 0 twice"),
        (_merge_samples, "token_ids differs"),
        (_foreign_rollout, "not selected"),
        (_wrong_reward, "reward differs"),
        (_claim_versions, "policy_versions differs"),
    ],
)
def test_a_changed_record_is_caught(
    exported: Path, mutate: Callable[[list[dict[str, Any]]], None], expected: str
) -> None:
    _rewrite(exported, mutate)
    reasons = _reasons(exported)
    assert any(expected in r for r in reasons), reasons


def _as_version(out: Path, version: int, spans: bool) -> None:
    """Stamp the tokens shard with records version ``version``, with or without the
    ``policy_spans`` column version 2 ended with (valued as version 2 wrote it)."""
    shard = _shard(out)
    table = pq.read_table(shard)
    meta = {**table.schema.metadata, VERSION_KEY: str(version).encode()}
    if spans:
        versions = table.column("policy_versions").to_pylist()
        values = pa.array([None if v is None else False for v in versions], pa.bool_())
        table = table.append_column(pa.field("policy_spans", pa.bool_()), values)
    pq.write_table(table.replace_schema_metadata(meta), shard)


def test_a_folder_of_version_2_with_its_policy_spans_column_still_reads(exported: Path) -> None:
    assert SCHEMA_VERSION > 2
    _as_version(exported, 2, spans=True)
    assert _reasons(exported) == []


@pytest.mark.parametrize(("version", "spans"), [(2, False), (SCHEMA_VERSION, True)])
def test_a_shard_without_its_version_s_columns_is_caught(
    exported: Path, version: int, spans: bool
) -> None:
    _as_version(exported, version, spans)
    reasons = _reasons(exported)
    assert any(f"not the tokens schema of version {version}" in r for r in reasons), reasons


def _mutate_row(out: Path, rid: str, change: Callable[[dict[str, Any]], None]) -> list[str]:
    rows = read_rows(out / "results.jsonl")
    change(next(r for r in rows if r["rollout_id"] == rid))
    write_rows(out / "results.jsonl", rows)
    return _reasons(out)


@pytest.mark.parametrize(
    ("rid", "change"),
    [
        ("qwen3_breaks", lambda r: r["tokens"]["breaks"][0].update(position=3)),
        ("qwen3_breaks", lambda r: r["tokens"]["breaks"].pop()),
        ("qwen3_breaks", lambda r: r["tokens"].update(samples=[2])),
        ("no_tokens", lambda r: r["tokens"].update(kinds=[], reason=None)),
        ("prefix_kept", lambda r: r.update(tokens=None)),
        ("prefix_kept", lambda r: r["tokens"]["sampling"][0].update(temperature=0.5)),
        ("prefix_kept", lambda r: r["tokens"]["sampling"][0].update(logprobs_mode=None)),
        ("constrained_step", lambda r: r["tokens"]["sampling"][0].update(constraint="none")),
    ],
)
def test_a_changed_tokens_section_is_caught(
    exported: Path, rid: str, change: Callable[[dict[str, Any]], None]
) -> None:
    reasons = _mutate_row(exported, rid, change)
    assert any("tokens is" in r for r in reasons), reasons


def test_samples_of_a_rollout_with_unsound_tokens_are_caught(exported: Path) -> None:
    """A row claiming sound token data gets its samples checked against what the raw log gives."""
    reasons = _mutate_row(exported, "no_tokens", lambda r: r["tokens"].update(kinds=[]))
    assert any("tokens is" in r for r in reasons), reasons


def test_the_tokens_folder_matches_its_golden(exported: Path) -> None:
    records = pq.read_table(_shard(exported)).to_pylist()
    text = b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in records)
    rows = [
        {"rollout_id": r["rollout_id"], "tokens": r["tokens"]}
        for r in read_rows(exported / "results.jsonl")
    ]
    sections = b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in rows)
    for name, data in (("tokens.jsonl", text), ("tokens-sections.jsonl", sections)):
        path = REPO / "tests" / "golden" / name
        if os.environ.get("CONTAGENT_UPDATE_GOLDENS") == "1":
            path.write_bytes(data)
        assert path.read_bytes() == data, f"{name} differs from its golden"


def test_invariants_catch_a_wrong_cutting_rule_the_rebuild_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the rule would be rebuilt the same way; the invariants do not use the rule."""

    def trains_context(sample: rules.Sample, *args: Any) -> rules.SampleTokens:
        everything = rules.Sample(sample.steps[-1].branch, sample.sample, sample.steps)
        relabelled = tuple(
            rules.StepTokens(**{**vars(s), "branch": sample.branch}) for s in everything.steps
        )
        return rules.sample_tokens(rules.Sample(sample.branch, sample.sample, relabelled), *args)

    monkeypatch.setattr(fmt, "sample_tokens", trains_context)
    runs = tmp_path / "runs"
    build_token_rollouts(runs)
    export([runs], tmp_path / "out", ExportOptions(formats=("tokens",), filter="all"))
    reasons = _reasons(tmp_path / "out")
    # the rebuild agrees with the export; only the invariants see the shared step trained twice
    assert reasons and not any("differs" in r for r in reasons), reasons
    assert (
        "tokens branch 1 sample 0: mask is not exactly its steps' sampled tokens less the "
        "constrained"
    ) in reasons


def test_invariants_catch_a_step_trained_twice_or_never(exported: Path) -> None:

    row = next(r for r in read_rows(exported / "results.jsonl") if r["rollout_id"] == "forked")
    raw = read_exchanges(Path(row["raw_log"]["path"]))
    usages = {i: raw.usage(i) for i in raw.indices}
    plan = rules.plan(row["steps"], row["branches"], raw.requests, raw.outcomes, usages)

    group = GroupFacts('["exp_tokens","tiny"]', 1, True, 0.0)
    records = [sample_record(row, s, group, False) for s in plan.samples]
    data = RolloutData(tokens=plan, group=group)
    assert sample_problems("forked", records, data) == []
    assert ("forked", "step 1 is trained in 2 token records") in sample_problems(
        "forked", [*records, records[1]], data
    )
    assert ("forked", "step 1 is trained in 0 token records") in sample_problems(
        "forked", records[:1], data
    )
    bad = {**records[0], "token_ids": records[0]["token_ids"][:-1] + [7]}
    assert sample_problems("forked", [bad, records[1]], data)[0][1].endswith(
        "does not end with a kept step's tokens"
    )
