"""The card's Hub metadata, written from the Arrow schema, is what ``datasets`` itself writes.

``datasets`` is not imported by the exporter; here it is the reference (it is in the
``dev`` extra, so this runs wherever the test suite does).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
import yaml

from contagent.errors import ContagentError
from contagent.export import card
from contagent.export.card import CardFacts
from contagent.export.dataset_folder import rows_to_batch
from contagent.export.formats import FORMATS
from contagent.export.hub_meta import arrow_bytes, features_yaml

datasets = pytest.importorskip("datasets")
table_cast = pytest.importorskip("datasets.table").table_cast

_TYPES = [
    pa.null(), pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(),
    pa.uint16(), pa.uint32(), pa.uint64(), pa.float16(), pa.float32(), pa.float64(),
    pa.string(), pa.large_string(), pa.binary(), pa.large_binary(), pa.date32(), pa.date64(),
    pa.timestamp("ms"), pa.timestamp("us", tz="UTC"), pa.time32("s"), pa.time64("ns"),
    pa.duration("ms"), pa.decimal128(10, 2),
    pa.list_(pa.string()), pa.list_(pa.list_(pa.int64())), pa.large_list(pa.float32()),
    pa.list_(pa.int32(), 3), pa.struct([("a", pa.string()), ("b", pa.list_(pa.bool_()))]),
    pa.list_(pa.struct([("x", pa.struct([("y", pa.int64())]))])),
    pa.large_list(pa.struct([("z", pa.string())])),
    pa.dictionary(pa.int32(), pa.string()), pa.json_(),
]  # fmt: skip


def _reference(schema: pa.Schema) -> list:
    return datasets.Features.from_arrow_schema(schema)._to_yaml_list()


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_formats_features_are_datasets_own(name: str) -> None:
    schema = FORMATS[name].schema
    assert features_yaml(schema) == _reference(schema)


@pytest.mark.parametrize("arrow_type", _TYPES, ids=str)
def test_every_arrow_type_maps_as_datasets_maps_it(arrow_type: pa.DataType) -> None:
    required = not pa.types.is_null(arrow_type)  # a null column is always nullable
    schema = pa.schema([pa.field("c", arrow_type, nullable=not required), ("d", arrow_type)])
    assert features_yaml(schema) == _reference(schema)


def test_a_type_datasets_has_no_feature_for_is_refused() -> None:
    with pytest.raises(ContagentError, match="no dataset-card feature"):
        features_yaml(pa.schema([("m", pa.map_(pa.string(), pa.int64()))]))


def _datasets_bytes(shards: list[Path], schema: pa.Schema) -> int:
    """``num_bytes`` the way ``datasets``' Parquet loader counts it."""
    target = datasets.Features.from_arrow_schema(schema).arrow_schema
    total = 0
    for shard in shards:
        with open(shard, "rb") as fh:
            whole = pads.ParquetFileFormat().make_fragment(fh)
            for group in range(whole.num_row_groups):
                fragment = whole.subset(row_group_ids=[group])
                size = fragment.row_groups[0].num_rows
                for batch in fragment.to_batches(batch_size=size, batch_readahead=0):
                    table = table_cast(pa.Table.from_batches([batch]), target)
                    total += table_cast(table.combine_chunks(), target).nbytes
    return total


def _chat_row(i: int) -> dict:
    return {
        "messages": [
            {"role": "user", "content": "x" * i},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": f"c{i}", "type": "function",
                             "function": {"name": "t", "arguments": '{"a": 1}'}}]},
        ],
        "tools": '[{"type": "function"}]', "rollout_id": f"r{i}", "branch": 0, "experiment": None,
        "model": "m", "reward": 1.0 if i % 2 else None, "passed": bool(i % 2),
        "num_turns": 1, "num_messages": 2, "prompt_tokens": i,
        "completion_tokens": 1, "total_tokens": i + 1,
    }  # fmt: skip


def _token_row(i: int) -> dict:
    n = i + 2
    return {
        "token_ids": list(range(n)), "mask": [k % 2 == 1 for k in range(n)],
        "logprobs": [-0.5 * (k % 2) for k in range(n)], "temperatures": [0.6] * n,
        "advantages": [0.5 * (k % 2) for k in range(n)], "advantage": 0.5, "group_id": '["t","m"]',
        "group_size": 2, "group_complete": True, "not_ready_kinds": [], "sampling_modified": True,
        "logprobs_mode": "processed_logprobs",
        "constrained": [False] * n, "env_name": "e", "rollout_id": f"r{i}", "branch": 0,
        "sample": 0, "reward": 1.0 if i % 2 else 0.0, "passed": bool(i % 2), "truncated": False,
        "experiment": None, "model": "m", "num_steps": 1, "num_tokens": n, "num_sampled": n // 2,
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_split_bytes_are_what_datasets_counts(tmp_path: Path, name: str) -> None:
    fmt = FORMATS[name]
    make = _token_row if "token_ids" in fmt.schema.names else _chat_row
    rows = [make(i) for i in range(23)]
    schema = fmt.schema
    table = pa.Table.from_batches([rows_to_batch(rows, schema)])
    shards = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    pq.write_table(table.slice(0, 15), shards[0], row_group_size=4)
    pq.write_table(table.slice(15), shards[1], row_group_size=8)
    assert arrow_bytes(shards) == _datasets_bytes(shards, schema) > 0


@pytest.mark.parametrize("license", [None, "apache-2.0"])
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_card_front_matter_is_what_datasets_own_writers_give(name: str, license: str) -> None:
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCardData

    fmt = FORMATS[name]
    facts = CardFacts(
        num_rows=1234, num_shards=2, num_bytes=56789, download_size=4321, data_files="data/train-*"
    )
    splits = datasets.SplitDict()
    splits.add(datasets.SplitInfo(name="train", num_bytes=56789, num_examples=1234))
    info = datasets.DatasetInfo(
        features=datasets.Features.from_arrow_schema(fmt.schema),
        splits=splits,
        download_size=4321,
        dataset_size=56789,
    )
    reference = DatasetCardData(
        license=license or "other",
        license_name=None if license else card.LICENSE_NAME,
        license_link=None if license else card.LICENSE_LINK,
        size_categories=["1K<n<10K"],
        task_categories=card.TASK_CATEGORIES,
        tags=card.TAGS,
        pretty_name=fmt.title,
    )
    DatasetInfosDict({"default": info}).to_dataset_card_data(reference)
    MetadataConfigs(
        {"default": {"data_files": [{"split": "train", "path": "data/train-*"}]}}
    ).to_dataset_card_data(reference)
    mine = yaml.dump(card.card_data(fmt, facts, license), sort_keys=False, allow_unicode=True)
    assert mine.strip() == reference.to_yaml()
