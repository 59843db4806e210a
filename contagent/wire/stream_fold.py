"""A stream's SSE payloads folded into what the non-streamed endpoint would return, in any API.

Untyped events are chat chunks, folded by :class:`~contagent.wire.chat_stream.ChatStream`;
an event with a ``type`` goes to the adapter that claims it (:meth:`WireApi.claims_event`),
whose folder then gives the stream's result. Which adapter claims a type is worked out once
per type and kept.
"""

from __future__ import annotations

from typing import Any

from contagent.wire import StreamFolder, adapter, adapters
from contagent.wire.chat_stream import ChatStream

#: event type -> the adapter that claims it, None: no adapter does
_OWNERS: dict[str, str | None] = {}
#: more distinct types than any API has: a stream of made-up types is not remembered
_MAX_OWNERS = 512


def _owner(etype: str) -> str | None:
    found = _OWNERS.get(etype, "")
    if found != "":
        return found
    found = next((a.name for a in adapters() if a.claims_event(etype)), None)
    if len(_OWNERS) < _MAX_OWNERS:
        _OWNERS[etype] = found
    return found


class StreamAssembler(ChatStream):
    """Folds SSE payloads into one response object, the way a client would."""

    __slots__ = ("_folders", "_typed")

    def __init__(self) -> None:
        super().__init__()
        self._folders: dict[str, StreamFolder] = {}
        #: the folder of the last typed event folded, None: the stream is chat chunks
        self._typed: StreamFolder | None = None

    def typed(self, etype: Any, event: dict[str, Any]) -> bool:
        name = _owner(etype) if isinstance(etype, str) else None
        if name is not None:
            folder = self._folders.get(name)
            if folder is None:
                made = adapter(name).stream_folder()
                if made is None:
                    return False
                folder = self._folders[name] = made
        elif self._typed is not None and self._typed.takes(etype):
            folder = self._typed
        else:
            return False
        self._typed = folder
        self._tpl = None
        folder.feed(etype, event)
        if folder.usage is not None or self.usage is None:
            self.usage = folder.usage
        self.misplaced = folder.misplaced
        return True

    @property
    def finish_reasons(self) -> list[str | None]:
        return [] if self._typed is not None else super().finish_reasons

    def result(self) -> dict[str, Any] | None:
        """The reassembled response, or None when no usable event arrived."""
        if self._typed is not None:
            result: dict[str, Any] | None = self._typed.result()
            return result
        return super().result()
