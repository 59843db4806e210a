"""Round trips: schemas match models, rows match their schema, Parquet loads with `datasets`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import orjson
import pyarrow.parquet as pq

from contagent.core.rows import ResultRow
from contagent.export.exporter import ExportOptions, export
from contagent.export.formats.prime_sft import PRIME_SFT_SCHEMA
from contagent.rawlog.records import OutcomeRecord, RequestRecord
from contagent.rawlog.result import RolloutResult
from tests.helpers import read_rows
from tools.schema_gen import SCHEMA_DIR, generate, render


def test_committed_schemas_are_generated_from_models() -> None:
    generated = generate()
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted(generated)
    for name, schema in generated.items():
        assert (SCHEMA_DIR / name).read_text() == render(schema), (
            f"run python -m tools.schema_gen ({name})"
        )


def test_raw_records_and_rows_match_models_and_schemas(samples: Path, tmp_path: Path) -> None:
    schemas = {name: json.loads((SCHEMA_DIR / name).read_text()) for name in generate()}
    for log in samples.glob("*/exchanges.jsonl"):
        for line in log.read_bytes().splitlines():
            if log.parent.name == "torn_line" and not line.endswith(b"}"):
                continue  # the sample's torn write, on purpose
            rec = orjson.loads(line)
            model, schema = (
                (RequestRecord, "request-record.schema.json")
                if rec["type"] == "request"
                else (OutcomeRecord, "outcome-record.schema.json")
            )
            model.model_validate(rec)
            jsonschema.validate(rec, schemas[schema])
    for result in samples.glob("*/result.json"):
        RolloutResult.model_validate_json(result.read_bytes())
        jsonschema.validate(
            orjson.loads(result.read_bytes()), schemas["rollout-result.schema.json"]
        )
    export([samples], tmp_path / "out", ExportOptions(filter="all"))
    rows = read_rows(tmp_path / "out" / "results.jsonl")
    for row in rows:
        assert ResultRow.model_validate(row).model_dump(mode="json") == row
        jsonschema.validate(row, schemas["results-row.schema.json"])


def test_parquet_loads_with_datasets_and_round_trips(samples: Path, tmp_path: Path) -> None:
    import datasets

    out = tmp_path / "out"
    summary = export([samples], out, ExportOptions(filter="all"))
    files = sorted(str(p) for p in (out / "prime-sft" / "data").glob("*.parquet"))
    assert files and all(
        pq.read_schema(f).equals(PRIME_SFT_SCHEMA, check_metadata=False) for f in files
    )
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert len(ds) == summary.branches_written
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    for rec in ds:
        row = rows[rec["rollout_id"]]
        assert row["training_ready"]
        tools = json.loads(rec["tools"])
        names = {t["function"]["name"] for t in tools}
        for msg in rec["messages"]:
            assert msg["content"] is None or isinstance(msg["content"], str)
            for tc in msg["tool_calls"] or []:
                assert msg["role"] == "assistant"
                assert isinstance(json.loads(tc["function"]["arguments"]), dict)
                assert tc["function"]["name"] in names
        assert rec["messages"][-1]["role"] == "assistant"


def test_export_folder_loads_by_its_card_and_shards_as_asked(samples: Path, tmp_path: Path) -> None:
    """The Hub folder as a user loads it: by the folder alone (the card's YAML says where
    the data is), across the shards ``shard_rows`` asked for, equal to the Parquet rows."""
    import datasets

    out = tmp_path / "out"
    summary = export([samples], out, ExportOptions(filter="all", shard_rows=5))
    shards = sorted((out / "prime-sft" / "data").glob("*.parquet"))
    n = summary.branches_written
    assert n > 5 and len(shards) == -(-n // 5)  # ceil(n / 5) shards
    assert all(pq.read_metadata(f).num_rows <= 5 for f in shards)
    ds = datasets.load_dataset(str(out / "prime-sft"), split="train")
    written = [r for f in shards for r in pq.read_table(f).to_pylist()]
    key = lambda r: (r["rollout_id"], r["branch"])  # noqa: E731
    assert sorted(ds, key=key) == sorted(written, key=key)
    assert ds.info.splits["train"].num_examples == n


def test_passed_filter_keeps_only_passing_ready_rollouts(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="passed"))
    ids = set(
        pq.read_table(next((out / "prime-sft" / "data").glob("*.parquet")))
        .column("rollout_id")
        .to_pylist()
    )
    rows = read_rows(out / "results.jsonl")
    assert ids == {r["rollout_id"] for r in rows if r["training_ready"] and r["passed"]}
    assert "failed_run" not in ids


def test_results_format_writes_no_parquet(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export([samples], out, ExportOptions(formats=()))
    assert (out / "results.jsonl").exists() and not (out / "prime-sft").exists()


def test_jobs_give_identical_output(samples: Path, tmp_path: Path) -> None:
    export([samples], tmp_path / "one", ExportOptions(jobs=1))
    export([samples], tmp_path / "two", ExportOptions(jobs=2))
    assert (tmp_path / "one" / "results.jsonl").read_bytes() == (
        tmp_path / "two" / "results.jsonl"
    ).read_bytes()


def test_reasoning_kept_by_default_and_dropped_on_request(samples: Path, tmp_path: Path) -> None:
    export([samples / "reasoning"], tmp_path / "keep", ExportOptions(filter="all"))
    export(
        [samples / "reasoning"], tmp_path / "drop", ExportOptions(filter="all", drop_reasoning=True)
    )
    keep = pq.read_table(next((tmp_path / "keep").rglob("*.parquet"))).to_pylist()[0]["messages"]
    drop = pq.read_table(next((tmp_path / "drop").rglob("*.parquet"))).to_pylist()[0]["messages"]
    reasons = [m["reasoning_content"] for m in keep if m["role"] == "assistant"]
    assert reasons[:2] == ["The secret is in a file; read it.", "Now write the answer."]
    assert all(m["reasoning_content"] is None for m in drop)
    assert all("<think>" not in (m["content"] or "") for m in keep + drop)


def _card_rollouts(folder: Path) -> int:
    line = next(
        ln for ln in (folder / "README.md").read_text().splitlines() if "Rollouts with rows" in ln
    )
    return int(line.split("|")[2].strip().replace(",", ""))


def test_each_card_counts_the_rollouts_of_its_own_folder(tmp_path: Path) -> None:
    """A card's "Rollouts with rows here" is the rollouts in that folder's shards, whatever
    other formats the export wrote beside it."""
    from tools.token_samples import build_token_rollouts

    runs = tmp_path / "runs"
    build_token_rollouts(runs)
    every = tmp_path / "every"
    export([runs], every, ExportOptions(filter="all", formats=("prime-sft", "tokens", "atif")))
    counts = {}
    for name in ("prime-sft", "tokens"):
        shards = (every / name / "data").glob("*.parquet")
        ids = {i for f in shards for i in pq.read_table(f).column("rollout_id").to_pylist()}
        counts[name] = _card_rollouts(every / name)
        assert counts[name] == len(ids) > 0, name
    assert counts["tokens"] != counts["prime-sft"]
    alone = tmp_path / "alone"
    export([runs], alone, ExportOptions(filter="all", formats=("prime-sft",)))
    assert _card_rollouts(alone / "prime-sft") == counts["prime-sft"]
