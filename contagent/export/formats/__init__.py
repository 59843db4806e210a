"""Training formats: each one a module with a :class:`Format` (its Arrow schema and records)
or a :class:`~contagent.export.formats.documents.DocumentFormat` (one JSON document per rollout).

The exporter writes a format's records as a dataset folder, or its documents and their
index; the validator rebuilds the same records from the rows and compares. A new format
is one new module and one line in :data:`FORMATS` or :data:`DOCUMENT_FORMATS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pyarrow as pa

from contagent.errors import ContagentError
from contagent.export.formats.atif import Atif
from contagent.export.formats.documents import DocumentFormat
from contagent.export.formats.prime_sft import PrimeSft
from contagent.export.formats.rollout_data import RolloutData
from contagent.export.formats.tokens_format import Tokens
from contagent.export.formats.trl import Trl
from contagent.export.formats.version import FORMAT_KEY, SCHEMA_VERSION, VERSION_KEY
from contagent.versions import check_version

FILTER_KEY = b"contagent.filter"
"""Parquet metadata key: the ``--filter`` the export chose rows by."""

FORMATS_KEY = b"contagent.formats"
"""Parquet metadata key: every format the export wrote (comma-separated), so that a
folder missing beside it is noticed without the export's summary file."""


class Format(Protocol):
    """One training format: a folder ``OUT/<name>/`` of Parquet rows with one schema."""

    name: str
    """The ``--format`` value and the folder's name."""
    title: str
    """The dataset card's title."""
    schema: pa.Schema
    older_schemas: Mapping[int, pa.Schema]
    """The schema of each older records version (:data:`SCHEMA_VERSION`) whose columns
    differ from ``schema``: a folder of that version has it."""
    column_docs: dict[str, str]
    column_notes: str
    usage: str
    """Markdown for the card: how a trainer takes this folder."""
    about: str
    """Markdown for the card's opening: what the data is and what one row holds
    (``{version}`` is the contagent version)."""
    rows_are: str
    """What a row is, in a few words (e.g. ``conversation branches``)."""
    key_columns: tuple[str, ...]
    """The columns that, with ``rollout_id``, name one record of a rollout."""

    def selected(self, row: dict[str, Any], rollout_filter: str) -> bool:
        """Does this format hold records of ``row`` under ``--filter``?"""
        ...

    def left_out(self, row: dict[str, Any], data: RolloutData) -> str | None:
        """The kind this format leaves a selected row out for (e.g. ``unrenderable_tool``:
        the tools its model saw are not known); None when it holds the row."""
        ...

    def records(self, row: dict[str, Any], data: RolloutData) -> list[dict[str, Any]]:
        """The Parquet records of a selected row (JSON columns as text)."""
        ...


FORMATS: dict[str, Format] = {f.name: f for f in (PrimeSft(), Trl(), Tokens())}
"""The Parquet formats (dataset folders)."""

DOCUMENT_FORMATS: dict[str, DocumentFormat] = {f.name: f for f in (Atif(),)}
"""The document formats (a JSON file per rollout and an index)."""

FORMAT_NAMES: tuple[str, ...] = (*FORMATS, *DOCUMENT_FORMATS)
"""Every ``--format`` value but ``results``."""


def format_named(name: str) -> Format:
    """The Parquet format called ``name``, or a one-line error listing the known ones."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ContagentError(_unknown(name)) from None


def document_format_named(name: str) -> DocumentFormat:
    """The document format called ``name``, or a one-line error listing the known ones."""
    try:
        return DOCUMENT_FORMATS[name]
    except KeyError:
        raise ContagentError(_unknown(name)) from None


def rows_are(name: str) -> str:
    """What one record of format ``name`` is (a Parquet row or a document), in a few words."""
    return format_named(name).rows_are if name in FORMATS else document_format_named(name).rows_are


def _unknown(name: str) -> str:
    return f"unknown format {name!r} (known: {', '.join(FORMAT_NAMES)})"


def format_version(schema: pa.Schema, where: str) -> int:
    """The records' version a Parquet file's schema metadata gives, through the one version
    gate (a newer one raises :class:`~contagent.versions.NewerVersionError`)."""
    raw = (schema.metadata or {}).get(VERSION_KEY, b"")
    value: object = int(raw) if raw.isdigit() else raw.decode(errors="replace")
    return check_version(value, SCHEMA_VERSION, where)


def schema_at(fmt: Format, version: int) -> pa.Schema:
    """The schema ``fmt``'s shards have at records version ``version``."""
    return fmt.older_schemas.get(version, fmt.schema)


def format_of(schema: pa.Schema) -> str | None:
    """The format a Parquet file's schema metadata names, if any."""
    meta = schema.metadata or {}
    value = meta.get(FORMAT_KEY)
    return value.decode() if value else None
