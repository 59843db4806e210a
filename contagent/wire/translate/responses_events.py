"""Chat-completion chunks as the Responses stream events vLLM 0.32's Responses server sends.

:class:`ResponsesEvents` takes the chat stream one chunk at a time and returns the events
that chunk completes. The sequence, as vLLM's simple (chat-template) path builds it:

- the first chunk -> ``response.created`` and ``response.in_progress`` (the response
  object with no output, status ``in_progress``);
- each delta is split into reasoning, content and tool calls (grouped by index); a tool
  call outranks reasoning, which outranks content. A new kind of item, or a tool call of
  another index, closes the open item and opens the next:
  - content: ``output_item.added`` (a message), ``content_part.added``,
    ``output_text.delta``..., then ``output_text.done``, ``content_part.done``,
    ``output_item.done``;
  - reasoning: the same with ``reasoning_text`` events;
  - a tool call: ``output_item.added``, ``function_call_arguments.delta``... and
    ``function_call_arguments.done``, ``output_item.done``. A custom tool's call streams
    ``custom_tool_call_input.delta`` events of its decoded payload instead;
- the end of the upstream stream (``[DONE]``) -> the open item closes, then
  ``response.completed`` with every streamed item and the usage;
- a chunk that is no chat chunk (an error object) -> one ``error`` event, and nothing after.

Every event carries a ``sequence_number`` counting from 0.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from contagent.wire.translate.responses_reply import (
    ReplyContext,
    call_item,
    decode_custom_input,
    message_item,
    reasoning_item,
    response_object,
    usage,
)


def sse_event(payload: dict[str, Any]) -> bytes:
    # orjson writes what vLLM's pydantic serialiser writes: compact, non-ASCII as UTF-8
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


#: The start of the one-string wrapper a custom tool's arguments are sampled in.
_WRAPPER = re.compile(r'\s*\{\s*"input"\s*:\s*"')


def custom_payload_prefix(arguments: str) -> str:
    """The longest decodable prefix of a partial ``{"input": "..."}`` wrapper's payload, so
    that streamed deltas stay a prefix of the final input."""
    found = _WRAPPER.match(arguments)
    if found is None:
        return ""
    body = arguments[found.end() :]
    for stop in range(len(body), -1, -1):  # the longest prefix that closes as a JSON string
        try:
            text = json.loads('"' + body[:stop] + '"')
        except ValueError:
            continue
        if text and "\ud800" <= text[-1] <= "\udbff":  # half a surrogate pair: wait for the rest
            text = text[:-1]
        return str(text)
    return ""


class ResponsesEvents:
    """The Responses events for one chat stream; :meth:`feed` each chunk in order."""

    def __init__(self, ctx: ReplyContext) -> None:
        self.ctx = ctx
        self.items: list[dict[str, Any]] = []  # done items, what response.completed lists
        self._seq = 0
        self._started = self._failed = False
        self._prompt_tokens: int | None = None
        self._finish: Any = None
        self._usage: Any = None
        self._state: str | None = None  # "content", "reasoning", "tool"
        self._item_id = ""
        self._text = ""
        self._call: dict[str, Any] = {}
        self._custom_sent = ""

    def _event(self, payload: dict[str, Any]) -> bytes:
        payload["sequence_number"] = self._seq
        self._seq += 1
        return sse_event(payload)

    def feed(self, chunk: Any) -> list[bytes]:
        if self._failed:
            return []
        if chunk == "[DONE]":
            return self._complete()
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list):
            self._failed = True
            error = chunk.get("error") if isinstance(chunk, dict) else None
            message = (
                str(error.get("message"))
                if isinstance(error, dict)
                else "Invalid data format received"
            )
            return [self._event({"type": "error", "code": None, "message": message, "param": None})]
        out: list[bytes] = []
        if not self._started:
            self._started = True
            ids = chunk.get("prompt_token_ids")
            self._prompt_tokens = (
                len(ids)
                if isinstance(ids, list)
                else (chunk.get("usage") or {}).get("prompt_tokens")
            )
            initial = response_object(self.ctx, [], "in_progress", None, self._prompt_tokens)
            out.append(self._event({"type": "response.created", "response": initial}))
            out.append(self._event({"type": "response.in_progress", "response": dict(initial)}))
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk["choices"][:1]:
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
            out += self._delta(choice.get("delta") or {})
        return out

    def _delta(self, delta: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        if delta.get("reasoning") is not None:
            out += self._step("reasoning", None, delta["reasoning"])
        if delta.get("content"):
            out += self._step("content", None, delta["content"])
        groups: dict[Any, list[dict[str, Any]]] = {}
        for call in delta.get("tool_calls") or []:
            groups.setdefault(call.get("index"), []).append(call)
        for calls in groups.values():
            if calls[0].get("function") is None:
                continue
            text = "".join((c.get("function") or {}).get("arguments") or "" for c in calls)
            out += self._step("tool", calls[0], text)
        return out

    def _step(self, state: str, call: dict[str, Any] | None, text: str) -> list[bytes]:
        out: list[bytes] = []
        switch = self._state != state or (
            call is not None
            and self._call.get("index") is not None
            and call.get("index") is not None
            and call["index"] != self._call["index"]
        )
        if switch:
            out += self._close()
            out += self._open(state, call)
        if text or state == "reasoning":
            out += self._more(text)
        return out

    @property
    def _index(self) -> int:
        return len(self.items)

    def _open(self, state: str, call: dict[str, Any] | None) -> list[bytes]:
        self._state, self._text = state, ""
        where = {"output_index": self._index}
        if state == "tool":
            assert call is not None
            function = call.get("function") or {}
            flat = str(function.get("name"))
            _, custom = self.ctx.tool_kinds()
            self._item_id = self.ctx.make_id("ctc" if flat in custom else "fc")
            call_id = call.get("id") or f"chatcmpl-tool-{self.ctx.make_id('x')[2:]}"
            self._call = {"index": call.get("index"), "flat": flat, "call_id": call_id}
            self._custom_sent = ""
            item = call_item(self.ctx, self._item_id, call_id, flat, "", "in_progress")
            return [self._event({"type": "response.output_item.added", "item": item, **where})]
        self._call = {}
        if state == "content":
            self._item_id = self.ctx.make_id("msg")
            item = message_item(self._item_id, None, "in_progress")
            part: dict[str, Any] = {
                "annotations": [],
                "text": "",
                "type": "output_text",
                "logprobs": [],
            }
        else:
            self._item_id = self.ctx.make_id("rs")
            item = {**reasoning_item(self._item_id, "", "in_progress"), "content": None}
            part = {"text": "", "type": "reasoning_text"}
        added = {"type": "response.output_item.added", "item": item, **where}
        part_added = {
            "type": "response.content_part.added",
            "content_index": 0,
            "item_id": self._item_id,
            "part": part,
            **where,
        }
        return [self._event(added), self._event(part_added)]

    def _more(self, text: str) -> list[bytes]:
        self._text += text
        where = {"item_id": self._item_id, "output_index": self._index}
        if self._state in ("content", "reasoning"):
            kind = "output" if self._state == "content" else "reasoning"
            event: dict[str, Any] = {
                "type": f"response.{kind}_text.delta",
                "content_index": 0,
                "delta": text,
            }
            if kind == "output":
                event["logprobs"] = []
            return [self._event({**event, **where})]
        if self._call["flat"] in self.ctx.tool_kinds()[1]:
            return self._custom_delta(custom_payload_prefix(self._text))
        return [
            self._event({"type": "response.function_call_arguments.delta", "delta": text, **where})
        ]

    def _custom_delta(self, payload: str) -> list[bytes]:
        sent = self._custom_sent
        if payload == sent:
            return []
        self._custom_sent = payload
        delta = payload[len(sent) :] if payload.startswith(sent) else payload
        where = {"item_id": self._item_id, "output_index": self._index}
        return [
            self._event({"type": "response.custom_tool_call_input.delta", "delta": delta, **where})
        ]

    def _close(self) -> list[bytes]:
        if self._state is None:
            return []
        where = {"item_id": self._item_id, "output_index": self._index}
        out: list[bytes] = []
        if self._state == "tool":
            item = call_item(
                self.ctx,
                self._item_id,
                self._call["call_id"],
                self._call["flat"],
                self._text,
                "completed",
            )
            if item["type"] == "custom_tool_call":
                payload = decode_custom_input(self._text)
                out += self._custom_delta(payload)
                out.append(
                    self._event(
                        {"type": "response.custom_tool_call_input.done", "input": payload, **where}
                    )
                )
            else:
                done = {
                    "type": "response.function_call_arguments.done",
                    "arguments": self._text,
                    "name": self._call["flat"],
                }
                out.append(self._event({**done, **where}))
        else:
            if self._state == "content":
                part: dict[str, Any] = {
                    "annotations": [],
                    "text": self._text,
                    "type": "output_text",
                    "logprobs": None,
                }
                item = message_item(self._item_id, self._text, "completed")
                text_done = {
                    "type": "response.output_text.done",
                    "content_index": 0,
                    "logprobs": [],
                    "text": self._text,
                }
            else:
                part = {"text": self._text, "type": "reasoning_text"}
                item = reasoning_item(self._item_id, self._text, "completed")
                text_done = {
                    "type": "response.reasoning_text.done",
                    "content_index": 0,
                    "text": self._text,
                }
            out.append(self._event({**text_done, **where}))
            out.append(
                self._event(
                    {
                        "type": "response.content_part.done",
                        "content_index": 0,
                        "part": part,
                        **where,
                    }
                )
            )
        out.append(
            self._event(
                {"type": "response.output_item.done", "item": item, "output_index": self._index}
            )
        )
        self.items.append(item)
        self._state = None
        return out

    def _complete(self) -> list[bytes]:
        out = self._close()
        status = "incomplete" if self._finish == "length" else "completed"
        final = response_object(
            self.ctx, list(self.items), status, usage(self._usage), self._prompt_tokens
        )
        out.append(self._event({"type": "response.completed", "response": final}))
        return out
