"""The dataset card, and the folder loaded by ``datasets`` offline: write -> load -> compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Features, load_dataset
from hub_samples import build_folder, make_summary, sample_row
from huggingface_hub import DatasetCard
from huggingface_hub.repocard import metadata_load

import contagent.export.dataset_folder as dataset_folder
from contagent.errors import ContagentError
from contagent.export.dataset_folder import ShardWriter, write_dataset_card
from contagent.export.formats.prime_sft import COLUMN_DOCS, PRIME_SFT_SCHEMA, PrimeSft

FEATURES = Features.from_arrow_schema(PRIME_SFT_SCHEMA)


def _expected(rows: list[dict]) -> list[dict]:
    return pa.Table.from_pylist(rows, schema=PRIME_SFT_SCHEMA).to_pylist()


def test_card_yaml_declares_config_features_and_split(tmp_path: Path) -> None:
    build_folder(tmp_path, n_rows=7, shard_rows=3)
    meta = metadata_load(tmp_path / "README.md")
    assert meta is not None
    assert meta["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*"}]}
    ]
    info = meta["dataset_info"]
    assert info["features"] == FEATURES._to_yaml_list()
    assert Features._from_yaml_list(info["features"]) == FEATURES
    assert info["splits"][0]["name"] == "train"
    assert info["splits"][0]["num_examples"] == 7
    shards = sorted((tmp_path / "data").iterdir())
    assert info["download_size"] == sum(p.stat().st_size for p in shards)
    assert "text-generation" in meta["task_categories"]
    assert "contagent" in meta["tags"]


def test_card_body_tells_the_reader_what_is_there(tmp_path: Path) -> None:
    build_folder(tmp_path, n_rows=4, shard_rows=3)
    card = DatasetCard.load(tmp_path / "README.md")
    text = card.text
    for needle in (
        "`qwen3-coder`",
        "`gpt\\|odd`",  # a pipe in a name does not break the table
        "`exp-a`",
        "| Rollouts read | 12 |",
        "| Training-ready rollouts | 9 |",
        "| Rollouts with rows here | 6 |",
        "| Rows (conversation branches) | 4 in 2 Parquet shard(s) |",
        "6 (pass rate 50.0%)",
        "| incomplete_consumed | 2 |",
        "| duplicate_retry | 5 |",
        "| billed | 9,000 | 900 | 9,900 |",
        "| selected | 8,000 | 800 | 8,800 |",
        "| excluded | 1,000 | 100 | 1,100 |",
        "contagent 0.1.0",
        '"filter": "passed"',
        "--format trl",
        "[data]",
        "renderer",
    ):
        assert needle in text, needle
    for column, doc in COLUMN_DOCS.items():
        assert f"| `{column}` |" in text
        assert doc in text


def test_card_refuses_a_summary_that_disagrees_with_the_shards(tmp_path: Path) -> None:
    with ShardWriter(tmp_path, max_rows_per_shard=2) as writer:
        writer.write([sample_row(i) for i in range(3)])
    with pytest.raises(ContagentError, match="shards hold 3 rows but the export summary says 5"):
        write_dataset_card(tmp_path, make_summary(5), PrimeSft())
    assert not (tmp_path / "README.md").exists()
    with pytest.raises(ContagentError, match="no data/ folder"):
        write_dataset_card(tmp_path / "elsewhere", make_summary(0), PrimeSft())


def test_round_trip_write_load_compare(tmp_path: Path) -> None:
    folder = tmp_path / "prime-sft"
    rows = build_folder(folder, n_rows=10, shard_rows=4)
    assert len(list((folder / "data").iterdir())) == 3
    ds = load_dataset(str(folder), cache_dir=str(tmp_path / "cache"))
    assert list(ds) == ["train"]
    train = ds["train"]
    assert train.features == FEATURES
    assert train.num_rows == 10
    assert train.to_list() == _expected(rows)
    call = train[0]["messages"][2]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"command": "pytest -k case_0"}
    assert json.loads(train[0]["tools"])[0]["function"]["name"] == "terminal"


def test_empty_export_loads_with_features_and_no_rows(tmp_path: Path) -> None:
    with ShardWriter(tmp_path):
        pass
    write_dataset_card(tmp_path, make_summary(0), PrimeSft())
    assert pq.read_table(tmp_path / "data/train-00000-of-00001.parquet").num_rows == 0
    # `datasets` refuses to materialize a split of zero examples ("corresponds to no
    # data"); streaming reads the same files and shows the features.
    train = load_dataset(str(tmp_path), split="train", streaming=True)
    assert train.features == FEATURES
    assert list(train) == []


def test_re_export_with_stale_card_is_caught_by_datasets(tmp_path: Path) -> None:
    """The card's num_examples is checked by ``datasets``: shards and card must agree."""
    build_folder(tmp_path, n_rows=5, shard_rows=2)
    with ShardWriter(tmp_path, max_rows_per_shard=2) as writer:
        writer.write([sample_row(i) for i in range(3)])
    with pytest.raises(Exception, match=r"NonMatchingSplitsSizes|num_examples|expected"):
        load_dataset(str(tmp_path), split="train", cache_dir=str(tmp_path / ".c1"))
    write_dataset_card(tmp_path, make_summary(3), PrimeSft())
    train = load_dataset(str(tmp_path), split="train", cache_dir=str(tmp_path / ".c2"))
    assert train.num_rows == 3


def test_large_shards_are_written_in_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dataset_folder, "ROW_GROUP_BYTES", 1)
    with ShardWriter(tmp_path, max_rows_per_shard=10) as writer:
        for i in range(4):
            writer.write([sample_row(2 * i), sample_row(2 * i + 1)])
    (shard,) = writer.paths
    assert pq.read_metadata(shard).num_row_groups == 4


def test_folder_loads_offline_in_a_fresh_process(tmp_path: Path) -> None:
    """HF_HUB_OFFLINE/HF_DATASETS_OFFLINE set, endpoint dead: only the local files are read."""
    folder = tmp_path / "prime-sft"
    rows = build_folder(folder, n_rows=6, shard_rows=4)
    script = textwrap.dedent(
        """
        import json, sys
        from datasets import load_dataset
        ds = load_dataset(sys.argv[1])
        train = ds["train"]
        print(json.dumps({"splits": list(ds), "rows": train.to_list(),
                          "features": train.features.to_dict()}))
        """
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["splits"] == ["train"]
    assert Features.from_dict(got["features"]) == FEATURES
    assert got["rows"] == _expected(rows)
