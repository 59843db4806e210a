"""Folder-level checks: every dataset folder an export wrote, against the rows.

For each format folder: its shard set is complete and readable, every shard has the
format's schema and records the ``--filter`` the export used (read from the shards,
so the export's summary file is not needed), and the records are exactly those the
format builds from the rows, one per branch of each selected row, nothing else.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq

from contagent import rules
from contagent.errors import ContagentError
from contagent.formats import FILTER_KEY, FORMATS, FORMATS_KEY, Format, format_of, format_version
from contagent.formats.folder import read_dataset_folder
from contagent.layout import ExportPaths

Problem = tuple[str | None, str]
"""(rollout id or None for the folder as a whole, reason)."""

BranchTools = dict[str, dict[int, list[Any]]]


def check_format_folders(
    paths: ExportPaths,
    rows: list[dict[str, Any]],
    branch_tools: BranchTools,
    summary: dict[str, Any] | None,
) -> tuple[int, list[Problem]]:
    """Check every format folder of the export against the rows and the export's summary
    (None when there is none); return (Parquet records read, problems)."""
    present = [name for name in FORMATS if paths.format_folder(name).root.exists()]
    problems: list[Problem] = []
    records = 0
    claimed: set[str] = set(_summary_formats(summary))
    for name in present:
        n, folder_problems, written = _check_folder(paths, FORMATS[name], rows, branch_tools)
        records += n
        problems += folder_problems
        claimed |= written
    for name in sorted(claimed - set(present)):
        problems.append((None, f"{name}/: the export wrote this format but the folder is gone"))
    return records, problems


def _summary_formats(summary: dict[str, Any] | None) -> list[str]:
    """Formats export-summary.json lists, when that file is there (it is optional)."""
    options = (summary or {}).get("options")
    formats = options.get("formats") if isinstance(options, dict) else None
    return [f for f in formats if f in FORMATS] if isinstance(formats, list) else []


def _check_folder(
    paths: ExportPaths, fmt: Format, rows: list[dict[str, Any]], branch_tools: BranchTools
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
        if format_of(table.schema) != fmt.name or not table.schema.equals(
            fmt.schema, check_metadata=False
        ):
            problems.append((None, f"{name}: not the {fmt.name} schema"))
            continue
        try:
            format_version(table.schema, name)
        except ContagentError as exc:
            problems.append((None, str(exc)))
            continue
        meta = table.schema.metadata or {}
        filters.add(meta.get(FILTER_KEY, b"").decode())
        written |= {f for f in meta.get(FORMATS_KEY, b"").decode().split(",") if f}
        tables.append(table)
    if len(filters) != 1 or not filters <= {"passed", "all"}:
        problems.append((None, f"{where}/: shards do not record one --filter (found {filters})"))
        return sum(t.num_rows for t in tables), problems, written
    (chosen,) = filters
    n, record_problems = _check_records(fmt, tables, rows, branch_tools, chosen)
    return n, problems + record_problems, written


def _check_records(
    fmt: Format,
    tables: list[Any],
    rows: list[dict[str, Any]],
    branch_tools: BranchTools,
    chosen: str,
) -> tuple[int, list[Problem]]:
    wanted = {r["rollout_id"]: r for r in rows if rules.selected_for_training(r, chosen)}
    expected: dict[str, list[dict[str, Any]]] = {}
    found: dict[str, set[int]] = {}
    problems: list[Problem] = []
    n = 0
    for table in tables:
        for rec in table.to_pylist():
            n += 1
            rid, branch = rec.get("rollout_id"), rec.get("branch")
            row = wanted.get(rid) if isinstance(rid, str) else None
            if row is None:
                problems.append((rid, f"{fmt.name}: record for a rollout that is not selected"))
                continue
            if branch in found.setdefault(rid, set()):
                problems.append((rid, f"{fmt.name}: branch {branch} twice"))
            found[rid].add(branch)
            if rid not in expected:
                try:
                    expected[rid] = fmt.records(row, branch_tools.get(rid, {}))
                except (ContagentError, KeyError, TypeError, ValueError) as exc:
                    problems.append((rid, f"{fmt.name}: cannot rebuild the records ({exc})"))
                    expected[rid] = []
            problems += _record_problems(fmt, rid, rec, expected[rid])
    for rid, row in wanted.items():
        if len(found.get(rid, ())) != row["branches"]:
            problems.append((rid, f"{fmt.name}: lacks branches of a selected training-ready row"))
    return n, problems


def _record_problems(
    fmt: Format, rid: str, rec: dict[str, Any], expected: list[dict[str, Any]]
) -> list[Problem]:
    """Each column of ``rec`` that differs from the branch rebuilt from its row."""
    branch = rec.get("branch")
    want = next((e for e in expected if e["branch"] == branch), None)
    if want is None:
        return [(rid, f"{fmt.name} branch {branch}: the row has no such branch")]
    return [
        (rid, f"{fmt.name} branch {branch}: {column} differs from the row")
        for column in fmt.schema.names
        if rec.get(column) != want.get(column)
    ]
