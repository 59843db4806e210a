"""Chat-completion chunks as the Messages stream events vLLM 0.32's Messages server sends.

:class:`MessagesEvents` takes the chat stream one chunk at a time (the upstream was asked
for usage on every chunk) and returns the events that chunk completes, so a relay sends
each as soon as its chunk arrives. The sequence, as vLLM builds it:

- the first chunk -> ``message_start`` (empty content, the chunk's usage);
- reasoning -> a ``thinking`` block (``thinking_delta`` events, then one
  ``signature_delta`` with a fresh signature when the block ends); content -> a ``text``
  block (``text_delta``); a tool call with an id and a name -> a ``tool_use`` block
  (``input_json_delta`` for its argument fragments). A new kind of block ends the open
  one (``content_block_stop``). Text arriving while a tool call is open is held and sent
  as a text block of its own when that call's block ends;
- the usage chunk (no choices) -> the open block ends, then ``message_delta`` with the stop
  reason (a tool call whose arguments do not parse as JSON does not count as complete) and
  the final usage;
- ``[DONE]`` -> ``message_stop``;
- a chunk that is no chat chunk (an error object) -> one ``error`` event, and nothing after.

Events are serialised as vLLM does (compact JSON, non-ASCII as it is, fields that vLLM
sets explicitly kept even when null).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from contagent.wire.translate.anthropic_reply import Signer, new_signature, stop_reason, usage


def sse_event(name: str, payload: dict[str, Any]) -> bytes:
    # orjson writes what vLLM's pydantic serialiser writes: compact, non-ASCII as UTF-8
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class MessagesEvents:
    """The Messages events for one chat stream; :meth:`feed` each chunk in order."""

    def __init__(self, sign: Signer = new_signature) -> None:
        self._sign = sign
        self.signatures: list[str] = []  # drawn, in order: what a replay needs to rebuild
        self._started = False
        self._failed = False
        self._finish: Any = None
        self._matched: Any = None
        self._tool_used = False
        self._last_args: list[str] = []
        self._next_index = 0
        self._kind: str | None = None  # the open block's type
        self._signature: str | None = None  # the open thinking block's, until sent
        self._tool_id: str | None = None
        self._held: list[str] = []
        self._ids: dict[int, str] = {}

    def feed(self, chunk: Any) -> list[bytes]:
        """The events one upstream chunk (parsed JSON, or the string ``"[DONE]"``) completes."""
        if self._failed:
            return []
        if chunk == "[DONE]":
            return [*self._flush(), sse_event("message_stop", {"type": "message_stop"})]
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list):
            self._failed = True
            message = "Invalid data format received"
            if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):
                message = str(chunk["error"].get("message") or message)
            error = {"type": "internal_error", "message": message}
            return [sse_event("error", {"type": "error", "error": error})]
        if not self._started:
            self._started = True
            return [self._message_start(chunk)]
        if not chunk["choices"]:
            return self._end(chunk)
        choice = chunk["choices"][0]
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
            self._matched = choice.get("stop_reason")
        delta = choice.get("delta") or {}
        out: list[bytes] = []
        if delta.get("reasoning"):
            if self._kind != "thinking":
                out += self._flush()
                out.append(self._start({"type": "thinking", "thinking": ""}))
            out.append(self._delta({"type": "thinking_delta", "thinking": delta["reasoning"]}))
        if delta.get("content"):
            if self._kind == "tool_use":
                self._held.append(delta["content"])
            else:
                if self._kind != "text":
                    out += self._flush()
                    out.append(self._start({"type": "text", "text": ""}))
                out.append(self._delta({"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or []:
            out += self._tool_call(call)
        return out

    def _message_start(self, chunk: dict[str, Any]) -> bytes:
        message: dict[str, Any] = {
            "id": chunk.get("id"),
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": chunk.get("model"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(chunk.get("usage")),
        }
        return sse_event("message_start", {"type": "message_start", "message": message})

    def _end(self, chunk: dict[str, Any]) -> list[bytes]:
        out = self._flush()
        complete = self._tool_used and _parses("".join(self._last_args))
        reason, sequence = stop_reason(
            self._finish or "stop", self._matched, tool_used=self._tool_used, tool_complete=complete
        )
        payload = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage(chunk.get("usage")),
        }
        return [*out, sse_event("message_delta", payload)]

    def _tool_call(self, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        function = call.get("function") or {}
        call_id = call.get("id")
        if call_id is not None:
            self._ids[call.get("index", 0)] = call_id
            name = function.get("name")
            if self._tool_id != call_id and name is not None:
                out += self._flush()
                self._tool_used = True
                self._last_args = []
                out.append(
                    self._start({"type": "tool_use", "id": call_id, "name": name, "input": {}})
                )
        else:
            call_id = self._ids.get(call.get("index", 0))
        arguments = function.get("arguments")
        if arguments and call_id is not None and self._tool_id == call_id:
            self._last_args.append(arguments)
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return out

    def _start(self, block: dict[str, Any]) -> bytes:
        self._kind = block["type"]
        self._tool_id = block.get("id")
        if self._kind == "thinking":
            self._signature = self._sign()
            self.signatures.append(self._signature)
        payload = {"type": "content_block_start", "content_block": block, "index": self._next_index}
        return sse_event("content_block_start", payload)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        payload = {"type": "content_block_delta", "delta": delta, "index": self._next_index}
        return sse_event("content_block_delta", payload)

    def _stop(self) -> list[bytes]:
        if self._kind is None:
            return []
        out: list[bytes] = []
        if self._signature is not None:
            out.append(self._delta({"type": "signature_delta", "signature": self._signature}))
        stop = {"type": "content_block_stop", "index": self._next_index}
        out.append(sse_event("content_block_stop", stop))
        self._kind = self._signature = self._tool_id = None
        self._next_index += 1
        return out

    def _flush(self) -> list[bytes]:
        """End the open block; text held back while a tool call was open becomes a block."""
        held, self._held = "".join(self._held), []
        out = self._stop()
        if held:
            out.append(self._start({"type": "text", "text": ""}))
            out.append(self._delta({"type": "text_delta", "text": held}))
            out += self._stop()
        return out
