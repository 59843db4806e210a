"""The Anthropic Messages API's event stream folded into the whole message.

Events (``event: <type>`` lines carry nothing the ``data`` JSON lacks, whose own
``type`` names the event): ``message_start`` gives the message with empty
``content``; ``content_block_start`` opens block ``index``, ``content_block_delta``
adds to it (``text_delta``, ``input_json_delta`` with ``partial_json``,
``thinking_delta``, ``signature_delta``, ``citations_delta``) and
``content_block_stop`` closes it (a tool call's ``input`` is then its joined
JSON); ``message_delta`` gives ``stop_reason``, ``stop_sequence`` and usage;
``message_stop`` ends the message; ``ping`` carries nothing; ``error`` ends the
stream with an error, which becomes the result.

A stream that ends before ``message_stop`` did not deliver the message: its
``stop_reason`` is left null, so it reads as incomplete (the raw events keep
what arrived).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

#: the ``type`` of the event that ends a Messages stream
END_EVENT = "message_stop"

#: the ``type`` of every event this reassembler takes
EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    }
)

#: delta type -> (block field it extends, delta field that holds the text)
_TEXT_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("signature", "signature"),
}


class MessageStream:
    """Accumulates one Messages stream; feed it each event's parsed ``data``."""

    __slots__ = ("_blocks", "_error", "_json", "_message", "_stopped", "misplaced", "usage")

    def __init__(self) -> None:
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        #: block index -> the ``partial_json`` fragments of a tool call's input
        self._json: dict[int, list[str]] = {}
        self._stopped = False
        self._error: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        #: events that name no open block, or come before ``message_start``: what they
        #: carried has no place in the message, so the stream is a fault, not a message
        self.misplaced = 0

    def feed(self, etype: str, event: dict[str, Any]) -> None:
        if etype == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self._message = {k: v for k, v in message.items() if k != "content"}
                self._add_usage(message.get("usage"))
        elif etype == "content_block_start":
            block = event.get("content_block")
            index = event.get("index")
            if isinstance(block, dict) and isinstance(index, int) and self._message is not None:
                self._blocks[index] = copy.deepcopy(block)
            else:
                self.misplaced += 1
        elif etype == "content_block_delta":
            self._delta(event.get("index"), event.get("delta"))
        elif etype == "content_block_stop":
            self._close(event.get("index"))
        elif etype == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and self._message is not None:
                for key in ("stop_reason", "stop_sequence"):
                    if key in delta:
                        self._message[key] = delta[key]
            else:
                self.misplaced += 1
            self._add_usage(event.get("usage"))
        elif etype == END_EVENT:
            self._stopped = True
        elif etype == "error":
            self._error = event

    def takes(self, etype: str) -> bool:
        """An ``error`` event, once the stream has begun, ends it with that error."""
        return etype == "error"

    def _add_usage(self, usage: Any) -> None:
        # message_delta's counts are cumulative: each replaces the one before
        if isinstance(usage, dict):
            self.usage = {**(self.usage or {}), **usage}

    def _delta(self, index: Any, delta: Any) -> None:
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None or not isinstance(delta, dict):
            self.misplaced += 1
            return
        kind = delta.get("type")
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self._json.setdefault(index, []).append(delta["partial_json"])
        elif kind in _TEXT_DELTAS:
            field, source = _TEXT_DELTAS[kind]
            text = delta.get(source)
            if isinstance(text, str):
                block[field] = str(block.get(field) or "") + text
        elif kind == "citations_delta" and "citation" in delta:
            block.setdefault("citations", []).append(delta["citation"])

    def _close(self, index: Any) -> None:
        parts = self._json.pop(index, None) if isinstance(index, int) else None
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None or not parts:
            return
        text = "".join(parts)
        try:
            block["input"] = orjson.loads(text) if text else {}
        except orjson.JSONDecodeError:
            block["input"] = text  # kept as sent; the export calls it bad tool arguments

    def result(self) -> dict[str, Any] | None:
        """The whole message, the stream's error, or None when nothing usable arrived."""
        if self._error is not None:
            return self._error
        if self._message is None:
            return None
        for index in list(self._json):
            self._close(index)
        message = dict(self._message)
        message["content"] = [self._blocks[i] for i in sorted(self._blocks)]
        if self.usage is not None:
            message["usage"] = self.usage
        if not self._stopped:
            message["stop_reason"] = None
        return message
