"""Goldens: every file an export writes, in every format, byte for byte.

Two corpora are exported with every format at once: the bundled samples (``data/rollouts``)
and a small generated benchmark corpus (:mod:`tools.corpus`, plain and token-carrying
rollouts). Each file of the output folder has its golden under ``tests/golden/<corpus>/``:

* text files (``results.jsonl``, ``export-summary.json``, every card ``README.md``, every
  document and index) byte for byte, with the two absolute paths of the run (the rollouts'
  folder, the output folder) written as ``<rollouts>`` and ``<out>``;
* a Parquet shard as ``<shard>.jsonl``, its rows in order, and ``<shard>.meta.json``, its
  Arrow schema, footer metadata and row groups (the bytes also name the pyarrow version);
* each chart image by its SHA-256, in ``images.sha256`` of its folder.

A file written that has no golden, or a golden no longer written, fails too. After an
intended change, regenerate every golden with
``CONTAGENT_UPDATE_GOLDENS=1 .venv/bin/python -m pytest tests/export/test_golden.py``
and read the diff (docs/development.md#goldens).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.export.formats import FORMAT_NAMES
from tests.helpers import REPO
from tools.corpus import make_rollout

GOLDEN = REPO / "tests" / "golden"
UPDATE = os.environ.get("CONTAGENT_UPDATE_GOLDENS") == "1"


def bench_corpus(root: Path) -> Path:
    """A few rollouts of the benchmark generator: the same bytes on every call."""
    rng = random.Random(1234)
    for n in range(2):
        make_rollout(root, n, steps=3 + n, rng=rng)
    make_rollout(root, 2, steps=2, rng=rng, tokens=True)
    return root


def _jsonl(records: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in records)


def _parquet(path: Path) -> dict[str, bytes]:
    """A shard as two readable files: its rows, and its schema and layout."""
    meta = pq.read_metadata(path)
    footer = {k.decode(): v.decode() for k, v in (meta.metadata or {}).items()}
    footer.pop("ARROW:schema", None)  # the schema in Arrow's IPC form; shown below as text
    layout = {
        "schema": pq.read_schema(path).to_string(show_schema_metadata=True).splitlines(),
        "footer": footer,
        "row_groups": [meta.row_group(i).num_rows for i in range(meta.num_row_groups)],
    }
    rows = pq.read_table(path).to_pylist()
    stem = path.name.removesuffix(".parquet")
    return {
        f"{stem}.jsonl": _jsonl(rows),
        f"{stem}.meta.json": orjson.dumps(layout, option=orjson.OPT_INDENT_2) + b"\n",
    }


def snapshot(out: Path, rollouts: Path) -> dict[str, bytes]:
    """Every file under ``out`` as its golden: relative path -> bytes."""
    paths = {str(rollouts).encode(): b"<rollouts>", str(out).encode(): b"<out>"}
    files: dict[str, bytes] = {}
    images: dict[Path, list[str]] = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = path.relative_to(out)
        if path.suffix == ".parquet":
            for name, data in _parquet(path).items():
                files[str(rel.parent / name)] = data
        elif path.suffix == ".png":
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            images.setdefault(rel.parent, []).append(f"{digest}  {rel.name}\n")
        else:
            data = path.read_bytes()
            for real, placeholder in paths.items():
                data = data.replace(real, placeholder)
            files[str(rel)] = data
    for folder, lines in images.items():
        files[str(folder / "images.sha256")] = "".join(lines).encode()
    return files


def _check(corpus: str, files: dict[str, bytes]) -> None:
    folder = GOLDEN / corpus
    if UPDATE:
        shutil.rmtree(folder, ignore_errors=True)
        for rel, data in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
    goldens = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    assert sorted(files) == sorted(goldens), f"{corpus}: the files written differ from the goldens"
    differ = [rel for rel, data in files.items() if (folder / rel).read_bytes() != data]
    assert not differ, f"{corpus}: differ from their goldens: {differ}"


def export_every_format(rollouts: Path, out: Path) -> Path:
    export([rollouts], out, ExportOptions(filter="all", formats=FORMAT_NAMES))
    return out


@pytest.fixture(scope="module")
def samples_snapshot(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    rollouts = REPO / "data" / "rollouts"
    return snapshot(export_every_format(rollouts, tmp_path_factory.mktemp("out")), rollouts)


def test_the_samples_export_matches_its_goldens(samples_snapshot: dict[str, bytes]) -> None:
    _check("samples", samples_snapshot)


def test_the_bench_export_matches_its_goldens(tmp_path: Path) -> None:
    rollouts = bench_corpus(tmp_path / "corpus")
    _check("bench", snapshot(export_every_format(rollouts, tmp_path / "out"), rollouts))


def test_the_bench_corpus_is_deterministic(tmp_path: Path) -> None:
    a, b = bench_corpus(tmp_path / "a"), bench_corpus(tmp_path / "b")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


@pytest.mark.skipif(UPDATE, reason="would rewrite the goldens")
def test_a_changed_byte_is_caught(samples_snapshot: dict[str, bytes]) -> None:
    """The comparison sees one changed card byte, one changed row and one missing file."""
    files = samples_snapshot
    card = next(rel for rel in files if rel.endswith("README.md"))
    for change in (
        lambda f: f.update({card: f[card].replace(b"Rollouts read", b"Rollouts  read")}),
        lambda f: f.update({"results.jsonl": f["results.jsonl"][:-2] + b"\n"}),
        lambda f: f.pop(card),
    ):
        changed = dict(files)
        change(changed)
        with pytest.raises(AssertionError):
            _check("samples", changed)
