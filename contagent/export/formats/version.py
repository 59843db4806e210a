"""The version of the dataset folders' records: every format's, one constant."""

from __future__ import annotations

#: Written in each shard's metadata and each document folder's manifest; every reader takes
#: it through :func:`contagent.versions.check_version`.
SCHEMA_VERSION = 2


def schema_metadata(name: str) -> dict[str, str]:
    """A format's Arrow schema metadata: its name and the records' version."""
    return {"contagent.format": name, "contagent.schema_version": str(SCHEMA_VERSION)}
