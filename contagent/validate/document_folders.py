"""A document folder (``OUT/<format>/``) against the rows: its index and every document.

The index must be exactly the one the rows give (the filter it records, every row
written or left out with the same reason, in row order), the folder must hold exactly
the documents the index lists, and every document must equal the one rebuilt from its
row, field by field.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from contagent.errors import ContagentError
from contagent.export.formats.documents import DocumentFormat, DocumentIndex, outcome
from contagent.export.formats.rollout_data import RolloutData
from contagent.export.formats.version import SCHEMA_VERSION
from contagent.layout import DocumentFolderPaths
from contagent.model_schema import first_error
from contagent.versions import check_version

Problem = tuple[str | None, str]

#: How many differing fields one document's violation names.
_SHOWN = 3


def check_document_folder(
    folder: DocumentFolderPaths,
    fmt: DocumentFormat,
    rows: list[dict[str, Any]],
    data: dict[str, RolloutData],
) -> tuple[int, list[Problem], set[str]]:
    """Check one document folder; return (documents read, problems, formats it says were
    written)."""
    where = fmt.name
    index, problem = _read_index(folder, where)
    if index is None:
        return 0, [(None, problem or f"{where}/: unreadable")], set()
    problems: list[Problem] = []
    if index.format != fmt.name or index.document_version != fmt.document_version:
        problems.append(
            (None, f"{where}/{folder.INDEX_NAME}: not a {fmt.name} {fmt.document_version} index")
        )
    expected: dict[str, dict[str, Any]] = {}
    left_out: dict[str, str] = {}
    for row in rows:
        rid = row["rollout_id"]
        doc, reason = outcome(fmt, row, data.get(rid, RolloutData()), index.filter)
        if doc is None:
            left_out[rid] = reason or ""
        else:
            expected[rid] = doc
    problems += _index_problems(index, expected, left_out, folder, where)
    n, doc_problems = _documents(folder, index, expected, where)
    return n, problems + doc_problems, set(index.formats)


def _read_index(folder: DocumentFolderPaths, where: str) -> tuple[DocumentIndex | None, str | None]:
    name = f"{where}/{folder.INDEX_NAME}"
    try:
        value = orjson.loads(folder.index.read_bytes())
    except FileNotFoundError:
        return None, f"{where}/: no {folder.INDEX_NAME}"
    except (OSError, orjson.JSONDecodeError) as exc:
        return None, f"{name}: unreadable ({exc})"
    try:
        check_version(
            value.get("records_version") if isinstance(value, dict) else None, SCHEMA_VERSION, name
        )
        return DocumentIndex.model_validate(value, strict=True), None
    except ContagentError as exc:
        return None, str(exc)
    except ValidationError as exc:
        return None, f"{name}: {first_error(exc, 'index')}"


def _index_problems(
    index: DocumentIndex,
    expected: dict[str, dict[str, Any]],
    left_out: dict[str, str],
    folder: DocumentFolderPaths,
    where: str,
) -> list[Problem]:
    problems: list[Problem] = []
    listed: dict[str, str] = {}
    for entry in index.written:
        rid = entry.rollout_id
        if rid in listed:
            problems.append((rid, f"{where}: the index lists the rollout twice"))
        listed[rid] = entry.file
        if rid not in expected:
            why = left_out.get(rid, "no such row")
            problems.append(
                (rid, f"{where}: the index lists a document the rows leave out ({why})")
            )
        elif entry.file != folder.document_name(rid):
            problems.append((rid, f"{where}: the index names the file {entry.file!r}"))
    for rid in sorted(expected.keys() - listed.keys()):
        problems.append((rid, f"{where}: lacks the document of a selected row"))
    given: dict[str, str] = {}
    for out in index.left_out:
        if out.rollout_id in given:
            problems.append((out.rollout_id, f"{where}: the index leaves the rollout out twice"))
        given[out.rollout_id] = out.reason
    for rid, reason in given.items():
        if rid in left_out and left_out[rid] != reason:
            problems.append((rid, f"{where}: the index gives another reason for leaving it out"))
        elif rid not in left_out and rid not in expected:
            problems.append((rid, f"{where}: the index leaves out a rollout there is no row of"))
    for rid in sorted(left_out.keys() - given.keys() - listed.keys()):
        problems.append((rid, f"{where}: the index does not say why the rollout is left out"))
    in_order = [e.rollout_id for e in index.written] == list(expected) and [
        e.rollout_id for e in index.left_out
    ] == list(left_out)
    if not problems and not in_order:
        problems.append((None, f"{where}: the index lists the rollouts out of row order"))
    return problems


def _documents(
    folder: DocumentFolderPaths,
    index: DocumentIndex,
    expected: dict[str, dict[str, Any]],
    where: str,
) -> tuple[int, list[Problem]]:
    problems: list[Problem] = []
    listed = {e.file for e in index.written}
    on_disk = {p.name for p in folder.root.iterdir()} - {folder.INDEX_NAME}
    for name in sorted(on_disk - listed):
        problems.append((None, f"{where}/{name}: a file the index does not list"))
    n = 0
    for rid, want in expected.items():
        name = folder.document_name(rid)
        if name not in on_disk:
            if name in listed:
                problems.append((rid, f"{where}/{name}: listed in the index but missing"))
            continue
        try:
            got = orjson.loads(folder.document(rid).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            problems.append((rid, f"{where}/{name}: unreadable ({exc})"))
            continue
        n += 1
        diffs = differences(got, want)
        if diffs:
            shown = ", ".join(diffs[:_SHOWN]) + (" ..." if len(diffs) > _SHOWN else "")
            problems.append((rid, f"{where}/{name}: {shown} differ from the row"))
    return n, problems


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    """The paths at which two JSON values differ (a type, a key, an item or a leaf)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for key in [*want, *(k for k in got if k not in want)]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in got or key not in want:
                out.append(sub)
            else:
                out += differences(got[key], want[key], sub)
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path} (length)"]
        out = []
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    same = type(got) is type(want) and got == want
    return [] if same else [path or "document"]
