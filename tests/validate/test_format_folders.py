"""Every format folder an export writes: loadable as trainers load it, and proven by validate."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from huggingface_hub.repocard import metadata_load

from contagent.export.dataset_folder import rows_to_batch
from contagent.export.exporter import ExportOptions, export
from contagent.export.formats import FILTER_KEY, FORMATS
from contagent.validate.check import validate
from tests.helpers import cli, read_rows

BOTH = ("prime-sft", "trl")


@pytest.fixture()
def out(samples: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all", formats=BOTH))
    return out


def _calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for m in messages for c in (m["tool_calls"] or [])]


def test_trl_folder_loads_with_objects_and_matches_prime_sft(out: Path) -> None:
    import datasets

    trl = datasets.load_dataset(str(out / "trl"), split="train")
    prime = datasets.load_dataset(str(out / "prime-sft"), split="train")
    assert len(trl) == len(prime) > 0
    assert isinstance(trl.features["tools"], datasets.Json)
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    seen_calls = 0
    for t, p in zip(trl, prime, strict=True):
        assert (t["rollout_id"], t["branch"]) == (p["rollout_id"], p["branch"])
        # Each tool exactly as the model saw it: no other tool's keys filled in as nulls.
        assert t["tools"] == json.loads(p["tools"])
        assert all(isinstance(tool, dict) for tool in t["tools"])
        for tc, pc in zip(_calls(t["messages"]), _calls(p["messages"]), strict=True):
            assert isinstance(tc["function"]["arguments"], dict)
            assert isinstance(pc["function"]["arguments"], str)
            assert tc["function"]["arguments"] == json.loads(pc["function"]["arguments"])
            seen_calls += 1
        strip = [{k: v for k, v in m.items() if k != "tool_calls"} for m in t["messages"]]
        assert strip == [{k: v for k, v in m.items() if k != "tool_calls"} for m in p["messages"]]
        assert rows[t["rollout_id"]]["training_ready"]
    assert seen_calls > 0


@pytest.mark.parametrize("shard_rows", [10_000, 5])
def test_cards_declare_license_size_and_arrow_bytes_as_datasets_computes(
    samples: Path, tmp_path: Path, shard_rows: int
) -> None:
    import datasets

    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all", formats=BOTH, shard_rows=shard_rows))
    for name in BOTH:
        meta = metadata_load(out / name / "README.md")
        assert meta is not None
        assert meta["license"] == "other" and meta["license_name"] and meta["license_link"]
        assert meta["size_categories"] == ["n<1K"]
        assert meta["pretty_name"] == FORMATS[name].title
        # What datasets itself measures, from the shards alone (no card to copy from).
        bare = tmp_path / f"bare-{name}"
        shutil.copytree(out / name / "data", bare / "data")
        builder = datasets.load_dataset_builder(str(bare), cache_dir=str(tmp_path / "cache"))
        builder.download_and_prepare()
        assert meta["dataset_info"]["dataset_size"] == builder.info.dataset_size
        assert meta["dataset_info"]["splits"][0]["num_bytes"] == builder.info.dataset_size
    card = (out / "trl" / "README.md").read_text()
    assert "assistant_only_loss=True" in card and "max_length" in card
    assert "to_trl" not in card and "to_trl" not in (out / "prime-sft" / "README.md").read_text()


def test_a_chosen_license_is_what_the_cards_declare(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all", formats=BOTH, license="cc-by-4.0"))
    for name in BOTH:
        meta = metadata_load(out / name / "README.md")
        assert meta is not None
        assert meta["license"] == "cc-by-4.0"
        assert "license_name" not in meta and "license_link" not in meta
        card = (out / name / "README.md").read_text()
        assert "under `cc-by-4.0`" in card and "Whoever publishes" not in card
    assert json.loads((out / "export-summary.json").read_text())["options"]["license"] == (
        "cc-by-4.0"
    )


def test_validate_is_healthy_on_both_and_needs_no_summary_file(out: Path) -> None:
    report = validate(out / "results.jsonl")
    assert report.ok, report.violations
    assert (
        report.parquet_rows
        == 2 * pq.read_metadata(next((out / "trl" / "data").glob("*.parquet"))).num_rows
    )
    for name in BOTH:  # the filter is recorded in the shards themselves
        shard = next((out / name / "data").glob("*.parquet"))
        assert pq.read_schema(shard).metadata[FILTER_KEY] == b"all"
    (out / "export-summary.json").unlink()
    assert validate(out / "results.jsonl").ok


def test_a_missing_shard_or_folder_is_a_violation(out: Path, samples: Path) -> None:
    export([samples], out, ExportOptions(filter="all", formats=BOTH, shard_rows=2))
    assert validate(out / "results.jsonl").ok
    last = sorted((out / "trl" / "data").glob("*.parquet"))[-1]
    last.unlink()
    reasons = [v.reason for v in validate(out / "results.jsonl").violations]
    assert any("incomplete" in r for r in reasons), reasons
    shutil.rmtree(out / "trl")
    (out / "export-summary.json").unlink()  # the prime-sft shards still say trl was written
    reasons = [v.reason for v in validate(out / "results.jsonl").violations]
    assert any("trl/: the export wrote this format" in r for r in reasons), reasons


def test_filter_comes_from_the_shards(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="passed", formats=BOTH))
    assert validate(out / "results.jsonl").ok
    # Shards that claim another filter than the rows they hold were chosen by are caught.
    shard = next((out / "trl" / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    meta = {**table.schema.metadata, FILTER_KEY: b"all"}
    pq.write_table(table.replace_schema_metadata(meta), shard)
    reasons = [v.reason for v in validate(out / "results.jsonl").violations]
    assert any("lacks branch" in r for r in reasons), reasons


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every field of a record (list items and struct fields, nulls included)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _changed(value: Any, json_text: bool) -> Any:
    if json_text:
        return json.dumps({"forged": True})
    if isinstance(value, bool) or value is None:
        return "forged" if value is None else not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + " forged"
    if isinstance(value, list):
        return value[1:]
    raise AssertionError(value)


@pytest.mark.parametrize("name", BOTH)
def test_every_field_of_a_record_is_checked(out: Path, name: str) -> None:
    fmt = FORMATS[name]
    shard = next((out / name / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    records = table.to_pylist()
    target = max(range(len(records)), key=lambda i: len(_calls(records[i]["messages"])))
    json_fields = {"tools", "arguments"} if name == "trl" else set()
    paths = _leaves(records[target])
    assert len(paths) > 20

    def write(recs: list[dict[str, Any]]) -> None:
        batch = rows_to_batch(recs, fmt.schema)
        pq.write_table(
            type(table).from_batches([batch]).replace_schema_metadata(table.schema.metadata),
            shard,
        )

    for path in paths:
        if path[-1] == "role":
            continue  # a role of None breaks the schema itself; other values are checked below
        forged = copy.deepcopy(records)
        node = forged[target]
        for key in path[:-1]:
            node = node[key]
        key = path[-1]
        node[key] = (
            []
            if key == "tool_calls" and node[key] is None
            else _changed(node[key], key in json_fields)
        )
        write(forged)
        assert not validate(out / "results.jsonl").ok, path
    forged = copy.deepcopy(records)
    forged[target]["messages"][0]["role"] = (
        "user" if records[target]["messages"][0]["role"] != "user" else "system"
    )
    write(forged)
    assert not validate(out / "results.jsonl").ok
    write(records)
    assert validate(out / "results.jsonl").ok


def test_cli_writes_both_formats_and_refuses_bad_combinations(
    samples: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cli("export", str(samples), "--out", str(out), "--format", "prime-sft", "--format", "trl",
        check=True)  # fmt: skip
    assert (out / "prime-sft" / "README.md").is_file() and (out / "trl" / "README.md").is_file()
    assert (out / "results.jsonl").is_file()
    assert cli("validate", str(out / "results.jsonl")).returncode == 0
    bad = cli("export", str(samples), "--out", str(out), "--format", "results", "--format", "trl")
    assert bad.returncode != 0 and "results.jsonl alone" in bad.stdout + bad.stderr
    bad = cli("export", str(samples), "--out", str(out), "--format", "sharegpt")
    assert bad.returncode != 0 and "unknown --format" in bad.stdout + bad.stderr
    only = tmp_path / "only"
    cli("export", str(samples), "--out", str(only), "--format", "results", check=True)
    assert sorted(p.name for p in only.iterdir()) == ["export-summary.json", "results.jsonl"]


def test_a_shard_of_a_newer_records_version_is_a_violation(samples: Path, tmp_path: Path) -> None:
    from contagent.export.formats.version import SCHEMA_VERSION, VERSION_KEY

    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all"))
    shard = sorted((out / "prime-sft" / "data").glob("*.parquet"))[0]
    table = pq.read_table(shard)
    meta = {**table.schema.metadata, VERSION_KEY: str(SCHEMA_VERSION + 1).encode()}
    pq.write_table(table.replace_schema_metadata(meta), shard)
    reasons = [v.reason for v in validate(out / "results.jsonl").violations]
    assert any(f"schema_version {SCHEMA_VERSION + 1} is newer" in r for r in reasons), reasons
