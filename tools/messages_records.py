"""Chat raw-log records as the proxy records them on the Anthropic Messages API.

What Claude Code would have sent on ``/v1/messages`` for the same conversation:
``system`` text blocks with ``cache_control``, content blocks,
``tool_use``/``tool_result``, the cache marker on the last block of the last
message; responses as ``message`` objects with ``input_tokens``/``output_tokens``.
:mod:`tools.messages_samples` records every chat sample again with it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from typing import Any

import orjson

from contagent.wire.chat import message_text
from tools.rollouts import RolloutBuilder

CACHE = {"type": "ephemeral"}
_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    """Chat content as Messages blocks: text parts as text blocks, an image URL as an image."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content or []:
        if part.get("type") == "image_url":
            media, _, data = part["image_url"]["url"].removeprefix("data:").partition(";base64,")
            source = {"type": "base64", "media_type": media, "data": data}
            blocks.append({"type": "image", "source": source})
        elif part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
    return blocks


def _input(arguments: str) -> Any:
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments  # what a broken few-shot demo holds


def assistant_blocks(message: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """A chat assistant message as Messages content blocks (signatures derived from ``key``)."""
    blocks: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        thought = message["reasoning_content"]
        blocks.append({"type": "thinking", "thinking": thought, "signature": f"sig_{key}"})
    blocks += _text_blocks(message.get("content"))
    for c in message.get("tool_calls") or []:
        fn = c["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": c["id"],
                "name": fn["name"],
                "input": _input(fn["arguments"]),
            }
        )
    return blocks


def _turn(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Append a turn; consecutive user turns are one message, as the API wants them."""
    if out and role == "user" and out[-1]["role"] == "user":
        out[-1]["content"] += blocks
    else:
        out.append({"role": role, "content": blocks})


def request_body(body: dict[str, Any]) -> dict[str, Any]:
    """A chat request body as Claude Code sends it on ``/v1/messages``."""
    messages = body["messages"]
    new: dict[str, Any] = {"model": body["model"], "max_tokens": 32000}
    start = 0
    if messages and messages[0].get("role") == "system":
        text = message_text(messages[0].get("content"))
        new["system"] = [{"type": "text", "text": text, "cache_control": dict(CACHE)}]
        start = 1
    out: list[dict[str, Any]] = []
    for n, m in enumerate(messages[start:], start=start):
        role = m.get("role")
        if role == "assistant":
            out.append({"role": "assistant", "content": assistant_blocks(m, f"h{n}")})
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": message_text(m.get("content")),
                "is_error": False,
            }
            _turn(out, "user", [result])
        elif role == "system":
            out.append({"role": "system", "content": message_text(m.get("content"))})
        else:
            _turn(out, "user", _text_blocks(m.get("content")))
    if out and isinstance(out[-1]["content"], list) and out[-1]["content"]:
        out[-1]["content"][-1]["cache_control"] = dict(CACHE)  # moves to the end every turn
    new["messages"] = out
    if "tools" in body:
        new["tools"] = [_tool(t) for t in body["tools"]]
    new.update({k: v for k, v in body.items() if k not in ("messages", "model", "tools")})
    new.pop("prompt_cache_key", None)
    return new


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool["function"]
    return {
        "name": fn["name"],
        "description": fn.get("description", ""),
        "input_schema": fn["parameters"],
    }


def usage(chat: Any) -> Any:
    """Chat usage as Messages usage; a total that disagrees (corrupt) becomes a null count."""
    if not isinstance(chat, dict) or "prompt_tokens" not in chat:
        return chat
    consistent = chat["total_tokens"] == chat["prompt_tokens"] + chat["completion_tokens"]
    return {
        "input_tokens": chat["prompt_tokens"],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": chat["completion_tokens"] if consistent else None,
    }


def response_body(response: Any, index: int) -> Any:
    if not isinstance(response, dict) or not ("choices" in response or "error" in response):
        return response  # already in this API's shape
    if "choices" not in response:  # an error body, in the API's error shape
        error = response.get("error", {})
        return {"type": "error", "error": {"type": "api_error", "message": error.get("message")}}
    choice = response["choices"][0]
    reason = choice.get("finish_reason")
    out = {
        "id": f"msg_{response['id']}",
        "type": "message",
        "role": "assistant",
        "model": response.get("model"),
        "content": assistant_blocks(choice["message"], f"o{index}"),
        "stop_reason": _STOP.get(reason, reason),
        "stop_sequence": None,
    }
    if "usage" in response:
        out["usage"] = usage(response["usage"])
    return out


def convert_record(record: dict[str, Any], rollout_id: str) -> dict[str, Any]:
    """One chat raw-log record as the proxy records it on ``/v1/messages``."""
    rec = copy.deepcopy(record)
    rec["rollout_id"] = rollout_id
    if rec["type"] == "request":
        rec["path"] = "/v1/messages?beta=true"
        rec["headers"] = {
            **rec.get("headers", {}),
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "claude-code-20250219",
        }
        if isinstance(rec.get("body"), dict):
            rec["body"] = request_body(rec["body"])
            wire = orjson.dumps(rec["body"])
        elif isinstance(rec.get("body_text"), str):  # a body only a lenient parser reads
            rec["body_text"] = json.dumps(request_body(json.loads(rec["body_text"])))
            wire = rec["body_text"].encode("utf-8", "surrogatepass")
        else:
            return rec
        rec["body_sha256"], rec["body_bytes"] = hashlib.sha256(wire).hexdigest(), len(wire)
    elif rec["type"] == "outcome":
        rec["response"] = response_body(rec.get("response"), rec["index"])
        rec["usage"] = usage(rec.get("usage"))
        rec["finish_reasons"] = []  # the Messages API has none
    return rec


def records(b: RolloutBuilder, keep: frozenset[int] = frozenset()) -> list[bytes]:
    """The builder's lines on ``/v1/messages``; a torn line and the indices in ``keep`` as
    they are."""
    out = []
    for line in b.lines:
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            out.append(line)
            continue
        converted = rec if rec["index"] in keep else convert_record(rec, b.rollout_id)
        out.append(orjson.dumps(converted))
    return out


Lines = list[bytes]


def edit(lines: Lines, change: Callable[[dict[str, Any]], None]) -> Lines:
    """Apply ``change`` to every record; the request bodies' hashes follow."""
    out = []
    for line in lines:
        rec = orjson.loads(line)
        change(rec)
        if rec["type"] == "request" and isinstance(rec.get("body"), dict):
            wire = orjson.dumps(rec["body"])
            rec["body_sha256"], rec["body_bytes"] = hashlib.sha256(wire).hexdigest(), len(wire)
        out.append(orjson.dumps(rec))
    return out
