"""The version of the dataset folders' records: every format's, one constant."""

from __future__ import annotations

#: Written in each shard's metadata and each document folder's manifest; every reader takes
#: it through :func:`contagent.versions.check_version`. 2 gave the tokens format prime-rl's
#: ``TrainingSample`` columns and the group's, 3 dropped its ``policy_spans`` column; a format
#: states the schema of each older version it differs in (``older_schemas``), so that a
#: folder written then still reads.
SCHEMA_VERSION = 3

#: The Arrow schema metadata keys of a shard's format name and of its records' version.
FORMAT_KEY = b"contagent.format"
VERSION_KEY = b"contagent.schema_version"


def schema_metadata(name: str) -> dict[bytes, str]:
    """A format's Arrow schema metadata: its name and the records' version."""
    return {FORMAT_KEY: name, VERSION_KEY: str(SCHEMA_VERSION)}
