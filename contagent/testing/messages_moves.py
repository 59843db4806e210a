"""The stub's :class:`~contagent.testing.llm_moves.Reply` as an Anthropic Messages-API answer.

``POST .../messages`` requests get a ``message`` object (JSON) or, with
``"stream": true`` (whatever the ``Accept`` header says, as Claude Code sends
it), the event stream Claude Code reads: ``message_start`` (empty content,
usage), ``ping``, for each block ``content_block_start`` / its deltas
(``thinking_delta`` and ``signature_delta``, ``text_delta``, ``input_json_delta``)
/ ``content_block_stop``, then ``message_delta`` (``stop_reason``, usage) and
``message_stop``. ``POST .../messages/count_tokens`` is answered without
consuming a move. Pure functions, so tests can feed them to the proxy's parsers.
"""

from __future__ import annotations

from typing import Any

import orjson

from contagent.testing.llm_moves import Reply, StubRequest, split_text
from contagent.wire.chat import route_ends_with
from contagent.wire.messages_api import is_messages_path

#: Reply.finish_reason (chat names) -> stop_reason; other values are sent as they are.
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def is_messages(req: StubRequest) -> bool:
    return is_messages_path(req.path)


def is_count_tokens(req: StubRequest) -> bool:
    return route_ends_with(req.path, "/messages/count_tokens")


def count_tokens_json(req: StubRequest) -> dict[str, Any]:
    return {"input_tokens": max(1, len(req.body) // 4)}


def _usage(req: StubRequest, reply: Reply) -> dict[str, Any]:
    if reply.usage is not None:
        u = dict(reply.usage)
        return {
            "input_tokens": u.get("input_tokens", u.get("prompt_tokens", 0)),
            "cache_creation_input_tokens": u.get("cache_creation_input_tokens", 0),
            "cache_read_input_tokens": u.get("cache_read_input_tokens", 0),
            "output_tokens": u.get("output_tokens", u.get("completion_tokens", 0)),
        }
    out_chars = len(reply.content or "") + len(reply.reasoning_content or "")
    out_chars += sum(len(t.name) + len(t.arguments_json) for t in reply.tool_calls)
    return {
        "input_tokens": max(1, len(req.body) // 4),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": max(1, out_chars // 4),
    }


def _input(arguments: str) -> Any:
    """A call's input object; arguments that are no JSON are sent as the string they are."""
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments


def content_blocks(reply: Reply, mid: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.reasoning_content is not None:
        blocks.append(
            {"type": "thinking", "thinking": reply.reasoning_content, "signature": f"sig_{mid}"}
        )
    if reply.content is not None:
        blocks.append({"type": "text", "text": reply.content})
    for i, t in enumerate(reply.tool_calls):
        blocks.append(
            {
                "type": "tool_use",
                "id": t.id or f"toolu_{mid}_{i}",
                "name": t.name,
                "input": _input(t.arguments_json),
            }
        )
    return blocks


def stop_reason(reply: Reply) -> str:
    reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return STOP_REASONS.get(reason, reason)


def message_json(req: StubRequest, reply: Reply, mid: str) -> dict[str, Any]:
    body = req.json if isinstance(req.json, dict) else {}
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": reply.model or str(body.get("model", "stub")),
        "content": content_blocks(reply, mid),
        "stop_reason": stop_reason(reply),
        "stop_sequence": None,
        "usage": _usage(req, reply),
    }


def _block_events(n: int, block: dict[str, Any], chunks: int) -> list[dict[str, Any]]:
    kind = block["type"]
    deltas: list[dict[str, Any]] = []
    if kind == "thinking":
        start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas += [
            {"type": "thinking_delta", "thinking": p} for p in split_text(block["thinking"], chunks)
        ]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas += [{"type": "text_delta", "text": p} for p in split_text(block["text"], chunks)]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        value = block["input"]
        arguments = value if isinstance(value, str) else orjson.dumps(value).decode()
        deltas += [
            {"type": "input_json_delta", "partial_json": p} for p in split_text(arguments, chunks)
        ]
    return [
        {"type": "content_block_start", "index": n, "content_block": start},
        *({"type": "content_block_delta", "index": n, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": n},
    ]


def message_events(req: StubRequest, reply: Reply, mid: str) -> list[tuple[str, str]]:
    """The stream as (event name, JSON data) pairs."""
    full = message_json(req, reply, mid)
    usage = full["usage"]
    started = {**full, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": started}, {"type": "ping"}]
    for n, block in enumerate(full["content"]):
        events += _block_events(n, block, reply.chunks)
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return [(e["type"], orjson.dumps(e).decode()) for e in events]
