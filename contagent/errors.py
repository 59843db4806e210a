"""The one exception type the library raises for bad input.

The CLI turns a :class:`ContagentError` into a one-line message and a
non-zero exit code; anything else escaping the library is a bug.
"""

from __future__ import annotations


class ContagentError(Exception):
    """A problem with the user's input or environment, explained in one line."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message.replace("\n", " "))
        if exit_code is not None:
            self.exit_code = exit_code

    def __reduce__(self) -> tuple[object, ...]:
        # keep exit_code when the error crosses a process boundary (export --jobs)
        return (_rebuild, (str(self), self.exit_code))


def _rebuild(message: str, exit_code: int) -> ContagentError:
    return ContagentError(message, exit_code=exit_code)
