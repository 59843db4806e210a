"""The one version gate every reader of a versioned record uses.

Each record kind has one version constant, next to its model: the raw log in
:mod:`contagent.rawlog.records`, ``result.json`` in :mod:`contagent.rawlog.result`, the
results row in :mod:`contagent.core.rows`, a rollout engine's ``policy.jsonl`` in
:mod:`contagent.rawlog.policy_journal`, ``experiment.json`` in
:mod:`contagent.runner.tasks.experiment`, the dataset folders' records in
:mod:`contagent.export.formats.version`.
Bumping a kind is a one-line change to its constant: a reader accepts every
version from 1 up to the constant and refuses a newer one, with a message telling
the user to upgrade.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import Field

from contagent.errors import ContagentError


class NewerVersionError(ContagentError):
    """A record written by a newer contagent than this one."""


def check_version(version: Any, current: int, where: str | None = None) -> int:
    """``version`` when this contagent reads it (an integer from 1 to ``current``).

    Raises :class:`NewerVersionError` for a newer version and :class:`ContagentError`
    for a value that is not a version at all; ``where`` (the file, and line) starts
    the message when given.
    """
    at = f"{where}: " if where else ""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ContagentError(f"{at}schema_version {version!r} is not a version number")
    if version > current:
        raise NewerVersionError(
            f"{at}schema_version {version} is newer than this contagent reads "
            f"({current}); upgrade contagent"
        )
    return version


def version_field(current: int, what: str) -> Any:
    """The ``schema_version`` field of a model whose kind is at version ``current``:
    written as ``current``, and every version up to it validates."""
    return Field(current, ge=1, le=current, description=f"{what} format version.")


def read_optional(path: Path) -> bytes | None:
    """The bytes of a record file, or None when there is none; one :class:`ContagentError`
    line naming it when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ContagentError(f"{path}: cannot read ({exc.strerror or exc})") from None


def versioned_object(
    data: bytes, where: str, current: int, default: int | None = 1
) -> dict[str, Any]:
    """The JSON object ``data`` holds, through the version gate (:func:`check_version`; a
    record without ``schema_version`` is version ``default``, None: it needs one).

    Bytes that are not a JSON object raise one :class:`ContagentError` line starting with
    ``where`` (the file, and line).
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ContagentError(f"{where}: malformed JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ContagentError(f"{where}: not a JSON object")
    check_version(value.get("schema_version", default), current, where)
    return value
