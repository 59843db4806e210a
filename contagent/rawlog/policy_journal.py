"""``policy.jsonl``: a rollout engine's policy versions and pauses, one line per event.

The engine (:mod:`contagent.engine`) appends a :class:`PolicyEvent` as each happens, so a
log dir says offline which version each int stamped in its raw logs is (the server's
``weight_version`` string where the server has one) and when the proxies held requests.
:func:`append_event` is its one writer and :func:`read_policy_journal` its one reader.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.model_schema import first_error
from contagent.versions import read_optional, version_field, versioned_object

#: ``policy.jsonl``'s version; a line without one is version 1.
POLICY_JOURNAL_VERSION = 1

PolicyEventKind = Literal["version", "pause", "idle", "resume"]

#: The count field each event carries besides ``version`` and ``weight_version``.
_COUNT = {"pause": "in_flight", "idle": "in_flight", "resume": "held"}


class PolicyEvent(BaseModel):
    """One line of ``policy.jsonl``."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    schema_version: int = version_field(POLICY_JOURNAL_VERSION, "policy.jsonl")
    event: PolicyEventKind = Field(
        description="version: exchanges from now on are stamped `version`; pause: the "
        "proxies began holding new requests; idle: the pause's wait for the requests "
        "upstream returned; resume: the held requests were let go."
    )
    time: float = Field(description="When it happened (Unix seconds).")
    version: int | None = Field(
        None, ge=0, description="The engine's policy version (version events only)."
    )
    weight_version: str | None = Field(
        None,
        description="The server's own name of that version, where the server has one "
        "(version events only).",
    )
    in_flight: int | None = Field(
        None, ge=0, description="Requests upstream then (pause and idle events only)."
    )
    held: int | None = Field(
        None, ge=0, description="Requests that waited at the proxies (resume events only)."
    )

    @model_validator(mode="after")
    def _fields_of_its_event(self) -> PolicyEvent:
        wanted = {"version"} if self.event == "version" else {_COUNT[self.event]}
        allowed = wanted | ({"weight_version"} if self.event == "version" else set())
        for name in ("version", "weight_version", "in_flight", "held"):
            present = getattr(self, name) is not None
            if name in wanted and not present:
                raise ValueError(f"a {self.event} event needs {name}")
            if present and name not in allowed:
                raise ValueError(f"a {self.event} event has no {name}")
        return self

    @classmethod
    def now(cls, event: PolicyEventKind, **fields: int | str | None) -> PolicyEvent:
        """The event ``event`` happening now, with its ``fields``."""
        return cls.model_validate({"event": event, "time": time.time(), **fields})


def append_event(log_dir: Path, event: PolicyEvent) -> None:
    """Append ``event`` to ``log_dir``'s journal; raises :class:`ContagentError` when it cannot."""
    path = RunPaths(log_dir).policy_journal
    line = orjson.dumps(event.model_dump(mode="json", exclude_none=True)) + b"\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as fh:
            fh.write(line)
    except OSError as exc:
        raise ContagentError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_policy_journal(log_dir: Path) -> list[PolicyEvent] | None:
    """``log_dir``'s journal, its events in order, or None when it has none (a log dir no
    engine wrote). Raises :class:`~contagent.versions.NewerVersionError` for a line from a
    newer contagent and :class:`ContagentError` (one line naming the file, line and field)
    for one that is not an event."""
    path = RunPaths(log_dir).policy_journal
    data = read_optional(path)
    if data is None:
        return None
    return [
        _event(line, f"{path}:{number}")
        for number, line in enumerate(data.splitlines(), 1)
        if line.strip()
    ]


def _event(line: bytes, where: str) -> PolicyEvent:
    value = versioned_object(line, where, POLICY_JOURNAL_VERSION)
    try:
        return PolicyEvent.model_validate(value)
    except ValidationError as exc:
        raise ContagentError(f"{where}: {first_error(exc, 'event')}") from None
