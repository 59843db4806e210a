"""The Hub-ready dataset folder that ``contagent export`` writes under ``OUT/prime-sft/``.

::

    OUT/prime-sft/
    ├── README.md                            dataset card: YAML (configs, features, splits) + prose
    ├── images/*.png                         the card's charts (contagent.charts)
    └── data/
        ├── train-00000-of-00003.parquet     Parquet shards, named the way the Hub names them
        ├── train-00001-of-00003.parquet
        └── train-00002-of-00003.parquet

The card's ``configs`` point the default config's ``train`` split at ``data/train-*``,
so ``datasets.load_dataset(folder)`` and ``load_dataset("ORG/NAME")`` read the same files.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq

from contagent.charts import CHART_DIR, write_card_charts
from contagent.errors import ContagentError
from contagent.exporters.prime_sft_schema import PRIME_SFT_SCHEMA
from contagent.exporters.summary import ExportSummary

EXPORT_SUBDIR = "prime-sft"
"""Name of the dataset folder inside an export's ``OUT`` directory."""

DATA_DIR = "data"
CARD_NAME = "README.md"
SHARD_GLOB = "data/train-*"
"""What the card's ``configs`` declare as the ``train`` split (and what an upload owns)."""

SHARD_RE = re.compile(r"^train-(\d{5})-of-(\d{5})\.parquet$")

# A flushed row group is at most this large, so a shard of long conversations is
# written in pieces instead of being held whole.
ROW_GROUP_BYTES = 16 * 1024 * 1024


def export_folder(out_dir: Path) -> Path:
    """The dataset folder of the export written to ``out_dir``."""
    return Path(out_dir) / EXPORT_SUBDIR


def shard_name(i: int, n: int) -> str:
    """Path of shard ``i`` of ``n`` inside the folder, as the Hub names it."""
    if not 0 <= i < n or n > 99_999:
        raise ValueError(f"no shard {i} of {n}")
    return f"{DATA_DIR}/train-{i:05d}-of-{n:05d}.parquet"


@dataclass(frozen=True)
class DatasetFolder:
    """A dataset folder checked to be complete: a card and one consistent set of shards."""

    root: Path
    card: Path
    shards: tuple[Path, ...]
    images: tuple[Path, ...] = ()  # the card's charts

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def list_shards(folder: Path) -> tuple[Path, ...]:
    """The folder's ``data/train-*.parquet`` shards, in order; raise unless they form one set."""
    folder = Path(folder)
    data = folder / DATA_DIR
    if not data.is_dir():
        raise ContagentError(f"{folder}: no {DATA_DIR}/ folder with Parquet shards")
    found: dict[int, Path] = {}
    totals: set[int] = set()
    for entry in data.iterdir():
        if not entry.name.startswith("train-"):
            continue
        match = SHARD_RE.match(entry.name)
        if not match or not entry.is_file():
            raise ContagentError(f"{entry}: not a shard named train-NNNNN-of-NNNNN.parquet")
        found[int(match.group(1))] = entry
        totals.add(int(match.group(2)))
    if not found:
        raise ContagentError(f"{data}: no train-NNNNN-of-NNNNN.parquet shards")
    if len(totals) != 1:
        counts = ", ".join(str(t) for t in sorted(totals))
        raise ContagentError(f"{data}: shards from different exports are mixed (of {counts})")
    (total,) = totals
    if sorted(found) != list(range(total)):
        missing = sorted(set(range(total)) - set(found))
        raise ContagentError(f"{data}: shard set of {total} is incomplete (missing {missing})")
    return tuple(found[i] for i in range(total))


def read_dataset_folder(folder: Path) -> DatasetFolder:
    """Check that ``folder`` is a complete dataset folder (card + readable shards)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ContagentError(f"{folder}: no such dataset folder")
    card = folder / CARD_NAME
    if not card.is_file() or card.stat().st_size == 0:
        raise ContagentError(f"{folder}: no {CARD_NAME} dataset card")
    shards = list_shards(folder)
    for shard in shards:
        _parquet_metadata(shard)
    images = tuple(sorted(p for p in (folder / CHART_DIR).glob("*.png") if p.is_file()))
    return DatasetFolder(root=folder, card=card, shards=shards, images=images)


def _parquet_metadata(path: Path) -> pq.FileMetaData:
    try:
        return pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        raise ContagentError(f"{path}: not a readable Parquet file ({exc})") from exc


@dataclass(frozen=True)
class _KeyPlan:
    """The field names of one struct level, and which fields nest further structs."""

    names: frozenset[str]
    lists: tuple[tuple[str, _KeyPlan], ...]
    structs: tuple[tuple[str, _KeyPlan], ...]

    @classmethod
    def of(cls, fields: pa.Schema | pa.StructType) -> _KeyPlan:
        lists, structs = [], []
        for field in fields:
            kind = field.type
            if pa.types.is_list(kind) and pa.types.is_struct(kind.value_type):
                lists.append((field.name, cls.of(kind.value_type)))
            elif pa.types.is_struct(kind):
                structs.append((field.name, cls.of(kind)))
        return cls(frozenset(f.name for f in fields), tuple(lists), tuple(structs))

    def check(self, value: object, where: str) -> None:
        """Refuse keys the schema has no column or field for: Arrow would drop them silently."""
        if not isinstance(value, dict):
            return
        if not self.names.issuperset(value):
            unknown = ", ".join(str(k) for k in value if k not in self.names)
            raise ContagentError(f"{where} has fields the dataset schema lacks: {unknown}")
        for name, plan in self.lists:
            items = value.get(name)
            if isinstance(items, list):
                for item in items:
                    plan.check(item, f"{where}.{name}[]")
        for name, plan in self.structs:
            plan.check(value.get(name), f"{where}.{name}")


def rows_to_batch(rows: list[dict], schema: pa.Schema = PRIME_SFT_SCHEMA) -> pa.RecordBatch:
    """Convert rows to a record batch, refusing any key the schema would silently drop.

    The exporter's worker processes call this so that only compact Arrow data
    crosses to the process that writes the shards.
    """
    keys = _key_plan(schema)
    if not rows:
        return pa.RecordBatch.from_pylist([], schema=schema)
    for row in rows:
        keys.check(row, "row")
    try:
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    except (pa.ArrowException, TypeError, ValueError, KeyError) as exc:
        raise ContagentError(f"row does not fit the dataset schema: {exc}") from exc


@functools.lru_cache(maxsize=8)
def _key_plan(schema: pa.Schema) -> _KeyPlan:
    return _KeyPlan.of(schema)


class ShardWriter:
    """Write rows as Hub-named Parquet shards of at most ``max_rows_per_shard`` rows.

    Shards go to a hidden staging folder beside ``data/``; only when all of them are
    complete does :meth:`close` name them ``train-XXXXX-of-NNNNN`` and swap the staging
    folder in for ``data/`` (two renames), so the folder never holds a mix of two
    exports' shards. Files in an old ``data/`` that are not train shards are kept.
    Memory holds at most one row group (``ROW_GROUP_BYTES``) or one shard, whichever
    is smaller, plus the rows of the current ``write`` call.
    """

    def __init__(
        self,
        folder: Path,
        schema: pa.Schema = PRIME_SFT_SCHEMA,
        max_rows_per_shard: int = 10_000,
    ) -> None:
        if max_rows_per_shard < 1:
            raise ContagentError(f"shard size must be at least 1 row, not {max_rows_per_shard}")
        self.folder = Path(folder)
        self.schema = schema
        self.max_rows_per_shard = max_rows_per_shard
        self.rows_written = 0
        self.paths: list[Path] = []
        self._staging = self.folder / f".{DATA_DIR}-staging-{secrets.token_hex(4)}"
        self._staged: list[Path] = []
        self._writer: pq.ParquetWriter | None = None
        self._shard_rows = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._state = "new"

    def __enter__(self) -> ShardWriter:
        self._open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _open(self) -> None:
        if self._state == "new":
            try:
                self._staging.mkdir(parents=True)
            except OSError as exc:
                raise ContagentError(f"cannot create {self._staging}: {exc}") from exc
            self._state = "open"
        elif self._state != "open":
            raise ContagentError("shard writer is already closed")

    def write(self, rows: list[dict]) -> None:
        """Append rows given as dicts with the schema's columns."""
        if rows:
            self.write_batch(rows_to_batch(rows, self.schema))

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Append a record batch that has exactly the writer's schema."""
        self._open()
        if not batch.schema.equals(self.schema, check_metadata=False):
            raise ContagentError("record batch schema differs from the dataset schema")
        for i, field in enumerate(self.schema):
            if not field.nullable and batch.column(i).null_count:
                raise ContagentError(f"column {field.name!r} may not hold nulls")
        offset = 0
        while offset < batch.num_rows:
            room = self.max_rows_per_shard - self._shard_rows - self._pending_rows
            piece = batch.slice(offset, min(room, batch.num_rows - offset))
            offset += piece.num_rows
            self._pending.append(piece)
            self._pending_rows += piece.num_rows
            self._pending_bytes += piece.nbytes
            self.rows_written += piece.num_rows
            if self._shard_rows + self._pending_rows == self.max_rows_per_shard:
                self._flush()
                self._close_shard()
            elif self._pending_bytes >= ROW_GROUP_BYTES:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            path = self._staging / f"part-{len(self._staged):05d}.parquet"
            self._writer = pq.ParquetWriter(path, self.schema)
            self._staged.append(path)
        self._writer.write_table(pa.Table.from_batches(self._pending, schema=self.schema))
        self._shard_rows += self._pending_rows
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def _close_shard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._shard_rows = 0

    def close(self) -> list[Path]:
        """Finish the last shard, name all shards and swap them in; return their paths."""
        if self._state == "closed":
            return self.paths
        self._open()
        self._flush()
        self._close_shard()
        if not self._staged:
            # An empty export still loads, with the right features and zero rows. The
            # shard has no row group at all: `datasets` cannot read an empty row group.
            path = self._staging / "part-00000.parquet"
            pq.ParquetWriter(path, self.schema).close()
            self._staged.append(path)
        n = len(self._staged)
        if n > 99_999:
            self.abort()
            raise ContagentError(
                f"{n} shards exceed the Hub's 5-digit naming; raise the shard size"
            )
        names = [shard_name(i, n) for i in range(n)]
        for staged, name in zip(self._staged, names, strict=True):
            staged.rename(self._staging / Path(name).name)
        self._swap_in()
        self._state = "closed"
        self.paths = [self.folder / name for name in names]
        return self.paths

    def _swap_in(self) -> None:
        data = self.folder / DATA_DIR
        old = self.folder / f".{DATA_DIR}-old-{secrets.token_hex(4)}"
        if data.exists():
            for entry in data.iterdir():
                if not entry.name.startswith("train-"):
                    entry.rename(self._staging / entry.name)
            data.rename(old)
        # Between these two renames there is no data/ at all, never a mix of two exports.
        self._staging.rename(data)
        if old.exists():
            shutil.rmtree(old)

    def abort(self) -> None:
        """Drop what this writer staged; the folder's previous shards stay as they were."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._state == "open":
            shutil.rmtree(self._staging, ignore_errors=True)
        self._state = "closed"


def write_dataset_card(
    folder: Path, summary: ExportSummary, schema: pa.Schema = PRIME_SFT_SCHEMA
) -> Path:
    """Write ``folder/README.md``: YAML that ``datasets`` and the Hub read, and a readable card.

    Call it after the shards are closed and ``summary`` is final: row counts come
    from the shards themselves and must agree with ``summary.branches_written``.
    """
    # `datasets` is a heavy import; the exporter's shard writing does not need it.
    from contagent.hub.card import render_card

    folder = Path(folder)
    shards = list_shards(folder)
    metas = [_parquet_metadata(p) for p in shards]
    num_rows = sum(m.num_rows for m in metas)
    if num_rows != summary.branches_written:
        raise ContagentError(
            f"{folder}: shards hold {num_rows} rows but the export summary says "
            f"{summary.branches_written} branches were written"
        )
    charts = write_card_charts(folder, summary.model_dump())
    text = render_card(
        summary,
        schema,
        num_rows=num_rows,
        num_shards=len(shards),
        num_bytes=sum(
            m.row_group(g).total_byte_size for m in metas for g in range(m.num_row_groups)
        ),
        download_size=sum(p.stat().st_size for p in shards),
        data_files=SHARD_GLOB,
        charts=charts,
    )
    card = folder / CARD_NAME
    tmp = folder / f".{CARD_NAME}.{secrets.token_hex(4)}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, card)
    return card
