"""Folder-level checks: every dataset folder an export wrote, against the rows.

Document folders (one JSON file per rollout) are checked by
:mod:`contagent.validate.document_folders`; the rest of this module is about Parquet folders.

For each format folder: its shard set is complete and readable, every shard has the
format's schema at the records version it states (an older one's when the format's columns
changed since) and records the ``--filter`` the export used (read from the shards,
so the export's summary file is not needed), and the records are exactly those the
format builds from the rows (one per branch of each selected row, or one per token
sample), nothing else: each column the format writes now is compared (a column an older
version had and this one dropped is read, not compared: see the format's
``older_schemas``). A selected row the format leaves out (``unrenderable_tool``: the tools
its model saw are not known) has no record there, and the export's summary counts exactly
those rows per format and kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq

from contagent.errors import ContagentError
from contagent.export.formats import (
    DOCUMENT_FORMATS,
    FILTER_KEY,
    FORMAT_NAMES,
    FORMATS,
    FORMATS_KEY,
    Format,
    format_of,
    format_version,
    schema_at,
)
from contagent.export.formats.folder import read_dataset_folder
from contagent.export.formats.rollout_data import RolloutData
from contagent.layout import ExportPaths
from contagent.validate.document_folders import check_document_folder
from contagent.validate.token_groups import shard_options, with_groups
from contagent.validate.token_invariants import sample_problems

Problem = tuple[str | None, str]
"""(rollout id or None for the folder as a whole, reason)."""

#: Per format, invariants its records must hold against the raw log, checked besides the
#: rebuild (they do not use the rule that cut the records).
_INVARIANTS: dict[str, Callable[[str, list[dict[str, Any]], RolloutData], list[Problem]]] = {
    "tokens": sample_problems
}

RowData = dict[str, RolloutData]
"""Per rollout id, what its records are rebuilt from besides the row."""


def check_format_folders(
    paths: ExportPaths,
    rows: list[dict[str, Any]],
    data: RowData,
    summary: dict[str, Any] | None,
) -> tuple[int, int, list[Problem]]:
    """Check every format folder of the export against the rows and the export's summary
    (None when there is none); return (Parquet records read, documents read, problems)."""
    present = [name for name in FORMAT_NAMES if paths.root.joinpath(name).exists()]
    problems: list[Problem] = []
    by_format = dict.fromkeys(present, data)
    if "tokens" in present:
        options, option_problems = shard_options(paths)
        problems += option_problems
        if options is not None:
            by_format["tokens"] = with_groups(data, options)
    records = documents = 0
    claimed: set[str] = set(_summary_formats(summary))
    for name in present:
        if name in DOCUMENT_FORMATS:
            folder = paths.document_folder(name)
            n, folder_problems, written = check_document_folder(
                folder, DOCUMENT_FORMATS[name], rows, data
            )
            documents += n
        else:
            n, folder_problems, written = _check_folder(paths, FORMATS[name], rows, by_format[name])
            records += n
        problems += folder_problems
        claimed |= written
    for name in sorted(claimed - set(present)):
        problems.append((None, f"{name}/: the export wrote this format but the folder is gone"))
    problems += _left_out_problems(present, rows, by_format, summary)
    return records, documents, problems


def _left_out(
    fmt: Format, rows: list[dict[str, Any]], data: RowData, chosen: str
) -> dict[str, str]:
    """The selected rows ``fmt`` leaves out, with the kind it leaves each out for."""
    out = {}
    for row in rows:
        if fmt.selected(row, chosen):
            kind = fmt.left_out(row, data.get(row["rollout_id"], RolloutData()))
            if kind is not None:
                out[row["rollout_id"]] = kind
    return out


def _left_out_problems(
    present: list[str],
    rows: list[dict[str, Any]],
    data: dict[str, RowData],
    summary: dict[str, Any] | None,
) -> list[Problem]:
    """The summary's per-format counts of left-out rows against the formats' rule."""
    options = (summary or {}).get("options")
    chosen = options.get("filter") if isinstance(options, dict) else None
    if chosen not in ("passed", "all"):
        return []
    said_all = (summary or {}).get("left_out")
    problems: list[Problem] = []
    for name in present:
        if name not in FORMATS:
            continue
        want: dict[str, int] = {}
        for kind in _left_out(FORMATS[name], rows, data[name], chosen).values():
            want[kind] = want.get(kind, 0) + 1
        said = said_all.get(name, {}) if isinstance(said_all, dict) else None
        if said != want:
            problems.append(
                (
                    None,
                    f"{name}/: the summary counts {said} rows left out, the rule leaves out {want}",
                )
            )
    return problems


def _summary_formats(summary: dict[str, Any] | None) -> list[str]:
    """Formats export-summary.json lists, when that file is there (it is optional)."""
    options = (summary or {}).get("options")
    formats = options.get("formats") if isinstance(options, dict) else None
    return [f for f in formats if f in FORMAT_NAMES] if isinstance(formats, list) else []


def _check_folder(
    paths: ExportPaths, fmt: Format, rows: list[dict[str, Any]], data: RowData
) -> tuple[int, list[Problem], set[str]]:
    where = fmt.name
    try:
        folder = read_dataset_folder(paths.format_folder(fmt.name).root)
    except ContagentError as exc:
        return 0, [(None, f"{where}/: {exc}")], set()
    problems: list[Problem] = []
    filters: set[str] = set()
    written: set[str] = set()
    tables = []
    for shard in folder.shards:
        with pq.ParquetFile(shard) as parquet:  # not read_table: no pyarrow.dataset import
            table = parquet.read()
        name = f"{where}/{folder.relative(shard)}"
        if format_of(table.schema) != fmt.name:
            problems.append((None, f"{name}: not the {fmt.name} schema"))
            continue
        try:
            version = format_version(table.schema, name)
        except ContagentError as exc:
            problems.append((None, str(exc)))
            continue
        if not table.schema.equals(schema_at(fmt, version), check_metadata=False):
            problems.append((None, f"{name}: not the {fmt.name} schema of version {version}"))
            continue
        meta = table.schema.metadata or {}
        filters.add(meta.get(FILTER_KEY, b"").decode())
        written |= {f for f in meta.get(FORMATS_KEY, b"").decode().split(",") if f}
        tables.append(table)
    if len(filters) != 1 or not filters <= {"passed", "all"}:
        problems.append((None, f"{where}/: shards do not record one --filter (found {filters})"))
        return sum(t.num_rows for t in tables), problems, written
    (chosen,) = filters
    n, record_problems = _check_records(fmt, tables, rows, data, chosen)
    return n, problems + record_problems, written


def _check_records(
    fmt: Format,
    tables: list[Any],
    rows: list[dict[str, Any]],
    data: RowData,
    chosen: str,
) -> tuple[int, list[Problem]]:
    """The folder's records are exactly those the format builds from the selected rows."""
    left_out = _left_out(fmt, rows, data, chosen)
    wanted = {
        r["rollout_id"]: r
        for r in rows
        if fmt.selected(r, chosen) and r["rollout_id"] not in left_out
    }
    expected: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    found: dict[str, set[tuple[Any, ...]]] = {}
    by_rollout: dict[str, list[dict[str, Any]]] = {}
    problems: list[Problem] = []
    n = 0
    for table in tables:
        for rec in table.to_pylist():
            n += 1
            rid = rec.get("rollout_id")
            key = tuple(rec.get(c) for c in fmt.key_columns)
            row = wanted.get(rid) if isinstance(rid, str) else None
            if row is None and isinstance(rid, str) and rid in left_out:
                problems.append(
                    (rid, f"{fmt.name}: record for a rollout left out ({left_out[rid]})")
                )
                continue
            if row is None:
                problems.append((rid, f"{fmt.name}: record for a rollout that is not selected"))
                continue
            if key in found.setdefault(rid, set()):
                problems.append((rid, f"{fmt.name}: {_name(fmt, key)} twice"))
            found[rid].add(key)
            if rid not in expected:
                expected[rid], rebuild = _expected(fmt, row, data.get(rid, RolloutData()))
                problems += rebuild
            problems += _record_problems(fmt, rid, rec, key, expected[rid])
            by_rollout.setdefault(rid, []).append(rec)
    for rid, row in wanted.items():
        if rid not in expected:
            expected[rid], rebuild = _expected(fmt, row, data.get(rid, RolloutData()))
            problems += rebuild
        lacking = expected[rid].keys() - found.get(rid, set())
        if lacking:
            what = ", ".join(_name(fmt, k) for k in sorted(lacking))
            problems.append((rid, f"{fmt.name}: lacks {what} of a selected row"))
    invariants = _INVARIANTS.get(fmt.name)
    if invariants is not None:
        for rid, records in by_rollout.items():
            problems += invariants(rid, records, data.get(rid, RolloutData()))
    return n, problems


def _expected(
    fmt: Format, row: dict[str, Any], data: RolloutData
) -> tuple[dict[tuple[Any, ...], dict[str, Any]], list[Problem]]:
    try:
        records = fmt.records(row, data)
    except (ContagentError, KeyError, TypeError, ValueError) as exc:
        return {}, [(row["rollout_id"], f"{fmt.name}: cannot rebuild the records ({exc})")]
    return {tuple(r[c] for c in fmt.key_columns): r for r in records}, []


def _name(fmt: Format, key: tuple[Any, ...]) -> str:
    return " ".join(f"{c} {v}" for c, v in zip(fmt.key_columns, key, strict=True))


def _record_problems(
    fmt: Format,
    rid: str,
    rec: dict[str, Any],
    key: tuple[Any, ...],
    expected: dict[tuple[Any, ...], dict[str, Any]],
) -> list[Problem]:
    """Each column of ``rec`` that differs from the record rebuilt from its row."""
    want = expected.get(key)
    if want is None:
        return [(rid, f"{fmt.name} {_name(fmt, key)}: the row gives no such record")]
    return [
        (rid, f"{fmt.name} {_name(fmt, key)}: {column} differs from the row")
        for column in fmt.schema.names
        if not _same(rec.get(column), want.get(column))
    ]


def _same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN (a temperature the request did not set)."""
    if a == b:
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
