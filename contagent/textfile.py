"""Reading a small text file that a user hands in (a task's files, a chat template):
bounded, UTF-8, and every failure one line naming the file."""

from __future__ import annotations

from pathlib import Path

from contagent.errors import ContagentError


def read_text(path: Path, limit: int, what: str, named: str | None = None) -> str:
    """The UTF-8 text of ``path``, refused past ``limit`` bytes (never read further).

    Errors are one :class:`ContagentError` line starting with ``named`` (default: the path)
    and saying ``what`` the file is.
    """
    name = named or str(path)
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ContagentError(f"{name}: cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise ContagentError(f"{name}: {what} over {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContagentError(f"{name}: not UTF-8 text ({exc.reason})") from None
