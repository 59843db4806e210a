"""The version of the dataset folders' records: every format's, one constant."""

from __future__ import annotations

#: Written in each shard's metadata and each document folder's manifest; every reader takes
#: it through :func:`contagent.versions.check_version`. 2 gave the tokens format prime-rl's
#: ``TrainingSample`` columns and the group's, 3 dropped its ``policy_spans`` column; a format
#: states the schema of each older version it differs in (``older_schemas``), so that a
#: folder written then still reads.
SCHEMA_VERSION = 3


def schema_metadata(name: str) -> dict[str, str]:
    """A format's Arrow schema metadata: its name and the records' version."""
    return {"contagent.format": name, "contagent.schema_version": str(SCHEMA_VERSION)}
