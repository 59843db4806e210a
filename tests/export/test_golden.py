"""Goldens: the export of the sample rollouts, byte for byte, with volatile fields normalised.

A change to what the exporter writes shows up here as a readable diff. After an
intended change, regenerate with ``CONTAGENT_UPDATE_GOLDENS=1 pytest tests/test_golden.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from contagent.export.exporter import ExportOptions, export
from tests.helpers import REPO, read_rows

GOLDEN = REPO / "tests" / "golden"


def _normalise(row: dict) -> dict:
    # the raw log's absolute path depends on where the samples were written
    row["raw_log"]["path"] = Path(row["raw_log"]["path"]).parent.name + "/exchanges.jsonl"
    return row


def _check(name: str, records: list[dict]) -> None:
    text = b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in records)
    path = GOLDEN / name
    if os.environ.get("CONTAGENT_UPDATE_GOLDENS") == "1":
        path.write_bytes(text)
    assert path.read_bytes() == text, f"{name} differs from its golden"


def test_export_matches_goldens(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all", formats=("prime-sft", "atif")))
    _check("results.jsonl", [_normalise(r) for r in read_rows(out / "results.jsonl")])
    shards = sorted((out / "prime-sft" / "data").glob("*.parquet"))
    _check("prime-sft.jsonl", [r for s in shards for r in pq.read_table(s).to_pylist()])
    index = orjson.loads((out / "atif" / "_index.json").read_bytes())
    documents = [orjson.loads((out / "atif" / w["file"]).read_bytes()) for w in index["written"]]
    _check("atif.jsonl", [index, *documents])
