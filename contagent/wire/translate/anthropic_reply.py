"""A chat completion as the Messages response vLLM 0.32's Messages server answers with.

- the message id and model are the chat completion's;
- content: a ``thinking`` block for the reasoning (with a fresh signature: vLLM draws a
  ``uuid4`` hex), a ``text`` block for the content, a ``tool_use`` block per tool call
  (its arguments parsed as JSON); nothing at all gives one empty ``text`` block;
- ``stop_reason``: ``length`` -> ``max_tokens``; a tool call -> ``tool_use``; a matched
  stop string -> ``stop_sequence`` with ``stop_sequence`` set; otherwise ``end_turn``;
- usage: ``input_tokens`` is the prompt less the cached tokens, which go in
  ``cache_read_input_tokens`` (and ``cache_creation_input_tokens``) only when the server
  reports them;
- ``None`` fields are left out, as vLLM serialises with ``exclude_none``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

#: A thinking block's signature, as vLLM makes it.
Signer = Callable[[], str]


def new_signature() -> str:
    return uuid.uuid4().hex


def usage(chat_usage: Any) -> dict[str, int]:
    """A chat ``usage`` object as Messages usage (keys in vLLM's order)."""
    if not isinstance(chat_usage, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    input_tokens = chat_usage.get("prompt_tokens") or 0
    out: dict[str, int] = {
        "input_tokens": 0,
        "output_tokens": chat_usage.get("completion_tokens") or 0,
    }
    details = chat_usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        for key, field in (
            ("created_cache_tokens", "cache_creation_input_tokens"),
            ("cached_tokens", "cache_read_input_tokens"),
        ):
            if details.get(key) is not None:
                input_tokens -= details[key]
                out[field] = details[key]
    out["input_tokens"] = max(0, input_tokens)
    return out


def stop_reason(
    finish_reason: Any, matched: Any, *, tool_used: bool, tool_complete: bool
) -> tuple[str | None, str | None]:
    """(``stop_reason``, ``stop_sequence``) for a chat finish reason and its ``stop_reason``.

    A length cut always wins; a matched stop string wins unless the tool calls are complete
    (a call it cut short must not run).
    """
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if isinstance(matched, str):
        return "stop_sequence", matched
    if finish_reason == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def _content(message: dict[str, Any], sign: Signer) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if message.get("reasoning"):
        content.append({"type": "thinking", "thinking": message["reasoning"], "signature": sign()})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        block = {"type": "tool_use", "id": call.get("id"), "name": function.get("name")}
        block["input"] = json.loads(function.get("arguments") or "null")
        content.append({k: v for k, v in block.items() if v is not None})
    return content or [{"type": "text", "text": ""}]


def to_messages_response(chat: dict[str, Any], sign: Signer = new_signature) -> dict[str, Any]:
    """The Messages response for the chat completion ``chat`` (its first choice)."""
    choice = chat["choices"][0]
    message = choice.get("message") or {}
    called = bool(message.get("tool_calls"))
    reason, sequence = stop_reason(
        choice.get("finish_reason"),
        choice.get("stop_reason"),
        tool_used=called,
        tool_complete=called,
    )
    out: dict[str, Any] = {
        "id": chat.get("id"),
        "type": "message",
        "role": "assistant",
        "content": _content(message, sign),
        "model": chat.get("model"),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(chat.get("usage")),
        "kv_transfer_params": chat.get("kv_transfer_params"),
        "ec_transfer_params": chat.get("ec_transfer_params"),
    }
    return {k: v for k, v in out.items() if v is not None}
