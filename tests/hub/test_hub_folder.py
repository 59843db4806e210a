"""ShardWriter: Hub shard names, shard sizes, the swap of a previous export, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Features
from hub_samples import sample_row
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contagent.errors import ContagentError
from contagent.export.dataset_folder import ShardWriter
from contagent.export.formats.folder import read_dataset_folder
from contagent.export.formats.prime_sft import PRIME_SFT_SCHEMA
from contagent.layout import DatasetFolderPaths

shard_name = DatasetFolderPaths.shard_name


def list_shards(folder: Path) -> tuple[Path, ...]:
    return DatasetFolderPaths(folder).shards()


def _normalized(rows: list[dict]) -> list[dict]:
    """Rows as Arrow gives them back (every struct field present)."""
    return pa.Table.from_pylist(rows, schema=PRIME_SFT_SCHEMA).to_pylist()


def _read_back(paths: list[Path]) -> list[dict]:
    return [row for p in paths for row in pq.read_table(p).to_pylist()]


def _entries(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def _assert_schema(schema: pa.Schema) -> None:
    """Parquet names list items ``element``; everything else is the export's schema."""
    assert Features.from_arrow_schema(schema) == Features.from_arrow_schema(PRIME_SFT_SCHEMA)
    assert [(f.name, f.nullable) for f in schema] == [
        (f.name, f.nullable) for f in PRIME_SFT_SCHEMA
    ]
    assert schema.metadata == PRIME_SFT_SCHEMA.metadata


def test_shard_name_uses_hub_naming() -> None:
    assert shard_name(0, 3) == "data/train-00000-of-00003.parquet"
    assert shard_name(12, 100) == "data/train-00012-of-00100.parquet"
    with pytest.raises(ValueError):
        shard_name(3, 3)


def test_rows_split_into_named_shards_and_read_back(tmp_path: Path) -> None:
    rows = [sample_row(i) for i in range(11)]
    with ShardWriter(tmp_path, max_rows_per_shard=4) as writer:
        writer.write(rows[:5])
        writer.write([])
        writer.write(rows[5:])
    assert writer.rows_written == 11
    assert writer.paths == [tmp_path / shard_name(i, 3) for i in range(3)]
    assert [pq.read_metadata(p).num_rows for p in writer.paths] == [4, 4, 3]
    assert _read_back(writer.paths) == _normalized(rows)
    _assert_schema(pq.read_schema(writer.paths[0]))
    # Nothing else is left behind: no staging folder, no temp file.
    assert _entries(tmp_path) == ["data", *(shard_name(i, 3) for i in range(3))]


def test_write_batch_accepts_record_batches(tmp_path: Path) -> None:
    rows = [sample_row(i) for i in range(5)]
    with ShardWriter(tmp_path, max_rows_per_shard=2) as writer:
        writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=PRIME_SFT_SCHEMA))
    assert len(writer.paths) == 3
    assert _read_back(writer.paths) == _normalized(rows)


def test_zero_rows_write_one_empty_shard_with_the_schema(tmp_path: Path) -> None:
    with ShardWriter(tmp_path) as writer:
        pass
    assert writer.paths == [tmp_path / "data/train-00000-of-00001.parquet"]
    table = pq.read_table(writer.paths[0])
    assert table.num_rows == 0
    _assert_schema(table.schema)


def test_new_export_replaces_old_shards_and_keeps_other_files(tmp_path: Path) -> None:
    with ShardWriter(tmp_path, max_rows_per_shard=2) as first:
        first.write([sample_row(i) for i in range(7)])
    assert len(first.paths) == 4
    (tmp_path / "data" / "notes.txt").write_text("mine")
    rows = [sample_row(100 + i) for i in range(3)]
    with ShardWriter(tmp_path, max_rows_per_shard=2) as second:
        second.write(rows)
    assert list_shards(tmp_path) == tuple(second.paths)
    assert _entries(tmp_path) == [
        "data",
        "data/notes.txt",
        "data/train-00000-of-00002.parquet",
        "data/train-00001-of-00002.parquet",
    ]
    assert _read_back(second.paths) == _normalized(rows)


def test_failed_export_leaves_previous_shards_untouched(tmp_path: Path) -> None:
    old_rows = [sample_row(i) for i in range(3)]
    with ShardWriter(tmp_path, max_rows_per_shard=2) as first:
        first.write(old_rows)
    before = {p: p.read_bytes() for p in first.paths}
    with pytest.raises(RuntimeError), ShardWriter(tmp_path, max_rows_per_shard=1) as second:
        second.write([sample_row(50 + i) for i in range(5)])
        raise RuntimeError("exporter failed half-way")
    assert {p: p.read_bytes() for p in list_shards(tmp_path)} == before
    assert _entries(tmp_path) == ["data", *(shard_name(i, 2) for i in range(2))]


def test_bad_rows_are_one_line_errors(tmp_path: Path) -> None:
    bad = sample_row(0) | {"branch": "not a number"}
    with ShardWriter(tmp_path) as writer:
        with pytest.raises(ContagentError, match="does not fit the dataset schema"):
            writer.write([bad])
        with pytest.raises(ContagentError, match="may not hold nulls"):
            writer.write([sample_row(1) | {"rollout_id": None}])
        with pytest.raises(
            ContagentError, match=r"row.messages\[\] has fields the dataset schema lacks: reasoning"
        ):
            row = sample_row(2)
            row["messages"][2]["reasoning"] = row["messages"][2].pop("reasoning_content")
            writer.write([row])
        with pytest.raises(
            ContagentError, match=r"row.messages\[\].tool_calls\[\].function has fields .*: args"
        ):
            row = sample_row(3)
            row["messages"][2]["tool_calls"][0]["function"]["args"] = "{}"
            writer.write([row])
        with pytest.raises(ContagentError, match="fields the dataset schema lacks: extra"):
            writer.write([sample_row(4) | {"extra": 1}])
        other = pa.RecordBatch.from_pylist([{"x": 1}])
        with pytest.raises(ContagentError, match="schema differs"):
            writer.write_batch(other)
    with pytest.raises(ContagentError, match="at least 1 row"):
        ShardWriter(tmp_path, max_rows_per_shard=0)


def test_mixed_or_incomplete_shard_sets_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "README.md").write_text("---\n---\n")
    with pytest.raises(ContagentError, match="no train-NNNNN"):
        read_dataset_folder(tmp_path)
    pq.write_table(PRIME_SFT_SCHEMA.empty_table(), data / "train-00000-of-00002.parquet")
    with pytest.raises(ContagentError, match="incomplete"):
        read_dataset_folder(tmp_path)
    pq.write_table(PRIME_SFT_SCHEMA.empty_table(), data / "train-00001-of-00003.parquet")
    with pytest.raises(ContagentError, match="mixed"):
        read_dataset_folder(tmp_path)
    (data / "train-00001-of-00003.parquet").unlink()
    (data / "train-00001-of-00002.parquet").write_bytes(b"PAR1 truncated")
    with pytest.raises(ContagentError, match="not a readable Parquet file"):
        read_dataset_folder(tmp_path)
    (data / "train-00001-of-00002.parquet").unlink()
    (data / "train-1.parquet").write_bytes(b"")
    with pytest.raises(ContagentError, match="not a shard named"):
        read_dataset_folder(tmp_path)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n_rows=st.integers(min_value=0, max_value=40),
    shard_rows=st.integers(min_value=1, max_value=12),
    call_sizes=st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=8),
)
def test_any_split_round_trips(
    tmp_path_factory: pytest.TempPathFactory, n_rows: int, shard_rows: int, call_sizes: list[int]
) -> None:
    folder = tmp_path_factory.mktemp("shards")
    rows = [sample_row(i) for i in range(n_rows)]
    with ShardWriter(folder, max_rows_per_shard=shard_rows) as writer:
        start, k = 0, 0
        while start < n_rows:
            size = call_sizes[k % len(call_sizes)] or 1
            writer.write(rows[start : start + size])
            start, k = start + size, k + 1
    n_shards = max(1, math.ceil(n_rows / shard_rows))
    assert writer.paths == [folder / shard_name(i, n_shards) for i in range(n_shards)]
    sizes = [pq.read_metadata(p).num_rows for p in writer.paths]
    assert all(size == shard_rows for size in sizes[:-1]) and sizes[-1] <= shard_rows
    assert _read_back(writer.paths) == _normalized(rows)
