"""Write a Hub-ready dataset folder (``layout.DatasetFolderPaths``): shards, then the card.

Shards are written under a hidden staging folder and swapped in whole, so a folder
never holds a mix of two exports' shards. Each shard's schema metadata records the
format, the ``--filter`` the rows were chosen by and every format the export wrote,
so the folder describes itself without the export's summary file.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq

from contagent.charts.export_charts import CardImage, card_images, write_card_charts
from contagent.errors import ContagentError
from contagent.export.export_summary import ExportSummary
from contagent.export.formats import Format
from contagent.export.formats.folder import parquet_metadata
from contagent.export.formats.prime_sft import PRIME_SFT_SCHEMA
from contagent.layout import DatasetFolderPaths

DATA_DIR = DatasetFolderPaths.DATA_DIR
CARD_NAME = DatasetFolderPaths.CARD_NAME

# A flushed row group is at most this large, so a shard of long conversations is
# written in pieces instead of being held whole.
ROW_GROUP_BYTES = 16 * 1024 * 1024


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

    Values of JSON-typed fields are given as JSON text (their Arrow storage). The
    exporter's worker processes call this so that only compact Arrow data crosses to
    the process that writes the shards.
    """
    keys = _key_plan(schema)
    storage = _storage_schema(schema)
    for row in rows:
        keys.check(row, "row")
    try:
        batch = pa.RecordBatch.from_pylist(rows, schema=storage)
        return batch if storage is schema else batch.cast(schema)
    except (pa.ArrowException, TypeError, ValueError, KeyError) as exc:
        raise ContagentError(f"row does not fit the dataset schema: {exc}") from exc


def _storage_type(kind: pa.DataType) -> pa.DataType:
    if isinstance(kind, pa.BaseExtensionType):
        return kind.storage_type
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_storage_type(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_storage_type(f.type)) for f in kind])
    return kind


@functools.lru_cache(maxsize=8)
def _storage_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with extension types (JSON) replaced by their storage types."""
    storage = pa.schema(
        [f.with_type(_storage_type(f.type)) for f in schema], metadata=schema.metadata
    )
    return schema if storage.equals(schema, check_metadata=True) else storage


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
        metadata: dict[bytes, bytes] | None = None,
    ) -> None:
        if max_rows_per_shard < 1:
            raise ContagentError(f"shard size must be at least 1 row, not {max_rows_per_shard}")
        self.folder = Path(folder)
        self.schema = schema
        # What every shard's footer says about the export besides the schema's own metadata.
        self._file_schema = schema.with_metadata({**(schema.metadata or {}), **(metadata or {})})
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
            self._writer = pq.ParquetWriter(path, self._file_schema)
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
            pq.ParquetWriter(path, self._file_schema).close()
            self._staged.append(path)
        n = len(self._staged)
        if n > 99_999:
            self.abort()
            raise ContagentError(
                f"{n} shards exceed the Hub's 5-digit naming; raise the shard size"
            )
        names = [DatasetFolderPaths.shard_name(i, n) for i in range(n)]
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
    folder: Path, summary: ExportSummary, fmt: Format, images: list[CardImage] | None = None
) -> Path:
    """Write ``folder/README.md``: YAML that ``datasets`` and the Hub read, and a readable card,
    with the summary's charts (``images``, drawn here when not given).

    Call it after the shards are closed and ``summary`` is final: row counts come
    from the shards themselves and must agree with the summary's ``format_rows``.
    """
    from contagent.export.card import CardFacts, render_card
    from contagent.export.hub_meta import arrow_bytes

    paths = DatasetFolderPaths(Path(folder))
    shards = paths.shards()
    num_rows = sum(parquet_metadata(p).num_rows for p in shards)
    written = summary.format_rows.get(fmt.name, 0)
    if num_rows != written:
        raise ContagentError(
            f"{paths.root}: shards hold {num_rows} rows but the export summary says "
            f"{written} were written"
        )
    facts = CardFacts(
        num_rows=num_rows,
        num_shards=len(shards),
        num_bytes=arrow_bytes(shards),
        download_size=sum(p.stat().st_size for p in shards),
        data_files=paths.SHARD_GLOB,
        charts=tuple(
            write_card_charts(paths.root, card_images(summary) if images is None else images)
        ),
    )
    text = render_card(summary, fmt, facts)
    tmp = paths.root / f".{paths.CARD_NAME}.{secrets.token_hex(4)}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, paths.card)
    return paths.card
