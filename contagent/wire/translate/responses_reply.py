"""A chat completion as the Responses object vLLM 0.32's Responses server answers with.

- output items, in vLLM's order: a ``reasoning`` item (the reasoning as one
  ``reasoning_text`` part), a ``message`` item (one ``output_text`` part), then per tool
  call a ``function_call`` item (a flattened namespace name split back into
  ``namespace`` and ``name``) or, for a custom tool, a ``custom_tool_call`` item whose
  ``input`` is the ``{"input": ...}`` wrapper's payload;
- ``status`` ``incomplete`` with ``incomplete_details.reason`` ``max_output_tokens`` when
  the answer was cut by length, else ``completed``;
- usage: input and output counts, cached input tokens, the reasoning tokens the chat usage
  reports; per-turn lists stay empty (one turn, as vLLM's simple context reports);
- the request's own settings echoed as vLLM echoes them, with the sampling values in
  effect (:class:`ReplyContext` says what the caller knows of the server's defaults).

Ids are drawn as vLLM draws them (``rs_``/``msg_``/``fc_``/``ctc_`` plus 16 hex digits);
the caller may pin them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contagent.wire.translate import responses_echo as echo
from contagent.wire.translate.responses_request import CUSTOM_INPUT_KEY, NAMESPACE_SEPARATOR


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().int & (2**64 - 1):016x}"


@dataclass
class ReplyContext:
    """What the Responses object needs beyond the chat answer."""

    request: dict[str, Any]
    response_id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    #: The server's context length, for the default ``max_output_tokens`` (None: unknown).
    max_model_len: int | None = None
    #: The server's default sampling values where the request sets none.
    defaults: dict[str, Any] = field(default_factory=dict)
    make_id: Callable[[str], str] = new_id

    def tool_kinds(self) -> tuple[dict[str, tuple[str, str]], frozenset[str]]:
        """(flat name -> (namespace, name), custom tool names) of the request's tools."""
        namespaced: dict[str, tuple[str, str]] = {}
        custom: set[str] = set()
        for tool in self.request.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            if tool.get("type") == "custom":
                custom.add(str(tool.get("name")))
            elif tool.get("type") == "namespace":
                for inner in tool.get("tools") or []:
                    if isinstance(inner, dict) and inner.get("type") == "function":
                        flat = f"{tool.get('name')}{NAMESPACE_SEPARATOR}{inner.get('name')}"
                        namespaced[flat] = (str(tool.get("name")), str(inner.get("name")))
        return namespaced, frozenset(custom)


def decode_custom_input(arguments: str) -> str:
    """A custom tool call's payload; arguments that are not the wrapper pass through."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    value = parsed.get(CUSTOM_INPUT_KEY) if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else arguments


def reasoning_item(item_id: str, text: str, status: str | None) -> dict[str, Any]:
    content = [{"text": text, "type": "reasoning_text"}]
    return {
        "id": item_id,
        "summary": [],
        "type": "reasoning",
        "content": content,
        "encrypted_content": None,
        "status": status,
    }


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = (
        []
        if not text
        else [{"annotations": [], "text": text, "type": "output_text", "logprobs": None}]
    )
    return {
        "id": item_id,
        "content": parts,
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


#: the call items' fields vLLM never sets, which its answers still carry as null (it dumps
#: the openai SDK's models whole; the SDK vLLM 0.32 installs has them)
_UNSET_CALL_FIELDS: dict[str, None] = {"async": None, "caller": None}


def call_item(
    ctx: ReplyContext, item_id: str, call_id: str, flat: str, arguments: str, status: str
) -> dict[str, Any]:
    namespaced, custom = ctx.tool_kinds()
    if flat in custom:
        payload = decode_custom_input(arguments)
        return {
            "call_id": call_id,
            "input": payload,
            "name": flat,
            "type": "custom_tool_call",
            "id": item_id,
            **_UNSET_CALL_FIELDS,
            "namespace": None,
        }
    namespace, name = namespaced.get(flat, (None, flat))
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
        "type": "function_call",
        "id": item_id,
        **_UNSET_CALL_FIELDS,
        "namespace": namespace,
        "status": status,
    }


def output_items(message: dict[str, Any], ctx: ReplyContext) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if message.get("reasoning"):
        out.append(reasoning_item(ctx.make_id("rs"), message["reasoning"], None))
    if message.get("content"):
        out.append(message_item(ctx.make_id("msg"), message["content"], "completed"))
    _, custom = ctx.tool_kinds()
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        name = str(function.get("name"))
        item_id = ctx.make_id("ctc" if name in custom else "fc")
        call_id = call.get("id") or f"chatcmpl-tool-{ctx.make_id('x')[2:]}"
        out.append(
            call_item(
                ctx, item_id, call_id, name, str(function.get("arguments") or ""), "completed"
            )
        )
    return out


def usage(chat_usage: Any) -> dict[str, Any]:
    chat_usage = chat_usage if isinstance(chat_usage, dict) else {}
    prompt = chat_usage.get("prompt_tokens") or 0
    completion = chat_usage.get("completion_tokens") or 0
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (chat_usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": cached,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": reasoning,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": prompt + completion,
    }


def _effective(ctx: ReplyContext, key: str, neutral: float) -> Any:
    """A sampling value as vLLM echoes it: a float (its response model's type), so a
    client's ``0`` comes back ``0.0``."""
    value = ctx.request.get(key)
    value = value if value is not None else ctx.defaults.get(key, neutral)
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _max_output_tokens(ctx: ReplyContext, prompt_tokens: int | None) -> int | None:
    asked = ctx.request.get("max_output_tokens")
    room = (
        None
        if ctx.max_model_len is None or prompt_tokens is None
        else ctx.max_model_len - prompt_tokens
    )
    if asked is None:
        return room
    return asked if room is None else min(asked, room)


def response_object(
    ctx: ReplyContext,
    output: list[dict[str, Any]],
    status: str,
    use: Any,
    prompt_tokens: int | None,
) -> dict[str, Any]:
    """The Responses object around ``output`` (``use``: its usage, or None while streaming)."""
    req = ctx.request
    return {
        "id": ctx.response_id,
        "created_at": ctx.created_at,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": req.get("instructions"),
        "metadata": req.get("metadata"),
        "model": req.get("model"),
        "object": "response",
        "output": output,
        "parallel_tool_calls": True
        if req.get("parallel_tool_calls") is None
        else req["parallel_tool_calls"],
        "temperature": _effective(ctx, "temperature", 1.0),
        "tool_choice": req.get("tool_choice", "auto"),
        "tools": echo.tools(req.get("tools")),
        "top_p": _effective(ctx, "top_p", 1.0),
        "background": bool(req.get("background")),
        "max_output_tokens": _max_output_tokens(ctx, prompt_tokens),
        "max_tool_calls": req.get("max_tool_calls"),
        "previous_response_id": None,
        "prompt": None,
        "reasoning": echo.reasoning(req.get("reasoning")),
        "service_tier": req.get("service_tier") or "auto",
        "status": status,
        "text": echo.text(req.get("text")),
        "top_logprobs": None,
        "truncation": req.get("truncation") or "disabled",
        "usage": use,
        "user": req.get("user"),
        "presence_penalty": _effective(ctx, "presence_penalty", 0.0),
        "frequency_penalty": _effective(ctx, "frequency_penalty", 0.0),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "input_messages": None,
        "output_messages": None,
    }


def to_responses_response(chat: dict[str, Any], ctx: ReplyContext) -> dict[str, Any]:
    """The Responses object for the chat completion ``chat`` (its first choice)."""
    choice = chat["choices"][0]
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    use = usage(chat.get("usage"))
    output = output_items(choice.get("message") or {}, ctx)
    return response_object(ctx, output, status, use, use["input_tokens"])
