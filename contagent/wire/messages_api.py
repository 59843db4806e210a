"""The Anthropic Messages API's adapter, and its exchanges in chat shape as pure functions.

A ``/v1/messages`` exchange is turned into the request messages and the
response message a chat completions exchange would have carried, so
that every chat rule (:mod:`contagent.rules`) applies to it unchanged:

- request ``system`` (a string or text blocks) -> a leading ``system`` message;
  a ``role: "system"`` message inside ``messages`` stays a system message at its place,
  unless the request record says the server merged it (``server.inline_system:
  "merged"``: vLLM's Messages route appends it to the leading system prompt when the
  template refuses a system message after the first turn), where the row holds what the
  model saw: one leading system message with vLLM's merged text;
- text content -> a string: the text blocks joined with ``"\\n"``, as the chat path
  joins text parts. ``cache_control`` is not content and is left out everywhere,
  so a block list and the same text sent later as a string compare equal, and a
  marker that moves to another block starts no new branch;
- an assistant message's ``thinking`` blocks -> ``reasoning_content``, its text ->
  ``content``, each ``tool_use`` -> a tool call (its ``id``, ``name`` and ``input``
  as canonical JSON arguments);
- each ``tool_result`` block -> a ``tool`` message answering its ``tool_use_id``
  (string or block content; ``is_error`` kept on the message), the user text
  beside it -> a user message after it;
- image and document blocks are kept as content parts (so the chat rules call
  them ``non_text_content``); ``redacted_thinking`` and block types this mapping
  does not know are reported (``unsupported_item``): fail closed;
- tools with an ``input_schema`` -> chat function tools; server tools kept as sent;
- the response (``type: "message"``) -> one assistant message. ``stop_reason``
  ``end_turn``/``stop_sequence`` -> ``stop``, ``tool_use`` -> ``tool_calls``,
  ``max_tokens`` -> ``length``; any other (``refusal``, ``pause_turn``, none) is
  kept as the finish reason, which the completeness rule does not accept.
  Usage is kept as sent; :func:`contagent.wire.chat.usage_counts` counts prompt tokens
  as ``input_tokens`` plus both cache counts.

``/v1/messages/count_tokens`` is not this route: it is no generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import orjson

from contagent.wire import WireApi
from contagent.wire.chat import canonical_arguments, route_ends_with
from contagent.wire.error_shapes import messages_error_event, messages_proxy_error
from contagent.wire.messages_stream import END_EVENT, EVENTS, MessageStream
from contagent.wire.translate import Untranslatable
from contagent.wire.translate.anthropic_request import merged_system

#: how the Messages API's route ends
ROUTES = ("/messages",)

#: Problem kind this mapping reports (a row's ``not_ready_kinds``).
ITEM_PROBLEM = "unsupported_item"

#: Block types kept as (non-text) content parts; the chat rules report them.
MEDIA_BLOCKS = frozenset({"image", "document", "search_result"})

#: ``stop_reason`` -> chat finish reason, for the reasons that end a turn on the model's own.
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls"}


def is_messages_path(path: Any) -> bool:
    """Is ``path`` (a request record's path, query string allowed) the Messages route?"""
    return route_ends_with(path, ROUTES)


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _is_text(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


def _content(blocks: list[Any], unknown: list[str]) -> Any:
    """Text blocks as one string; with any other block, the parts (cache_control left out)."""
    if all(_is_text(b) for b in blocks):
        return "\n".join(b["text"] for b in blocks)
    parts: list[Any] = []
    for block in blocks:
        if _is_text(block):
            parts.append({"type": "text", "text": block["text"]})
        elif isinstance(block, dict) and block.get("type") in MEDIA_BLOCKS:
            parts.append({k: v for k, v in block.items() if k != "cache_control"})
        else:
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            unknown.append(str(kind))
            parts.append(block)
    return parts


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    value = block.get("input")
    arguments = value if isinstance(value, str) else canonical_arguments(value)
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {"name": block.get("name"), "arguments": arguments},
    }


def assistant_message(content: Any, unknown: list[str]) -> dict[str, Any]:
    """An assistant turn's blocks as one chat assistant message."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in _blocks(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if _is_text(block):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        else:  # redacted_thinking (reasoning nobody can read), server tool blocks, ...
            unknown.append(str(kind) if kind else type(block).__name__)
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_message(block: dict[str, Any], unknown: list[str]) -> dict[str, Any]:
    content = block.get("content")
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": block.get("tool_use_id"),
        "content": _content(_blocks(content), unknown) if content is not None else "",
    }
    if isinstance(block.get("is_error"), bool):
        message["is_error"] = block["is_error"]
    return message


def _user_messages(role: str, content: Any, unknown: list[str]) -> list[dict[str, Any]]:
    """A user (or system) turn: each tool_result a tool message, the blocks between them
    one ``role`` message each, in order."""
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    out: list[dict[str, Any]] = []
    run: list[Any] = []
    for block in _blocks(content):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            if run:
                out.append({"role": role, "content": _content(run, unknown)})
                run = []
            out.append(_tool_message(block, unknown))
        else:
            run.append(block)
    if run or not out:
        out.append({"role": role, "content": _content(run, unknown)})
    return out


def chat_messages(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """A Messages request's ``system`` and ``messages`` as chat messages; also the block
    types it could not map."""
    unknown: list[str] = []
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None and system != []:
        out.append({"role": "system", "content": _content(_blocks(system), unknown)})
    messages = body.get("messages")
    if not isinstance(messages, list):
        return out, ["messages that are not a list"]
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            unknown.append(type(message).__name__)
            out.append({"role": "unmapped", "item": message})
        elif message["role"] == "assistant":
            out.append(assistant_message(message.get("content"), unknown))
        else:
            out.extend(_user_messages(message["role"], message.get("content"), unknown))
    return out, unknown


def chat_tools(tools: Any) -> Any:
    """Tools with an ``input_schema`` as chat function tools; others (server tools) as sent."""
    if not isinstance(tools, list):
        return tools
    out: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict) and "input_schema" in tool and "name" in tool:
            fn: dict[str, Any] = {"name": tool["name"]}
            if "description" in tool:
                fn["description"] = tool["description"]
            fn["parameters"] = tool["input_schema"]
            rest = {
                k: v
                for k, v in tool.items()
                if k not in ("name", "description", "input_schema", "cache_control", "type")
            }
            out.append({"type": "function", "function": fn, **rest})
        elif isinstance(tool, dict):
            out.append({k: v for k, v in tool.items() if k != "cache_control"})
        else:
            out.append(tool)
    return out


def finish_reason(response: dict[str, Any]) -> str | None:
    reason = response.get("stop_reason")
    if reason == "max_tokens":
        return "length"
    if not isinstance(reason, str):
        return None
    return FINISH_REASONS.get(reason, reason)


def chat_response(response: Any) -> tuple[Any, list[str]]:
    """A Messages response (``type: "message"``) as a chat completion, usage kept;
    anything else (an error body) as it is."""
    if not isinstance(response, dict) or response.get("type") != "message":
        return response, []
    unknown: list[str] = []
    message = assistant_message(response.get("content"), unknown)
    out = {k: v for k, v in response.items() if k not in ("content", "type", "role")}
    out["object"] = "chat.completion"
    out["choices"] = [{"index": 0, "message": message, "finish_reason": finish_reason(response)}]
    return out, unknown


def _merge_inline_system(
    body: dict[str, Any], messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` as the model saw them from a server that merges the system messages
    inside ``messages`` into the leading system prompt (vLLM's Messages route, for a
    template that refuses one after the first turn): one leading system message holding
    vLLM's merged text, no other. A body vLLM would refuse is left as it is."""
    try:
        merged = merged_system(body)
    except Untranslatable:
        return messages
    rest = [m for m in messages if m.get("role") != "system"]
    return rest if merged is None else [{"role": "system", "content": merged}, *rest]


def chat_body(
    body: dict[str, Any], merge_inline_system: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """A Messages request body in chat shape (``system`` folded into ``messages``);
    ``merge_inline_system``: the server merged its inline system messages."""
    messages, unknown = chat_messages(body)
    if merge_inline_system:
        messages = _merge_inline_system(body, messages)
    out = {k: v for k, v in body.items() if k not in ("system", "messages")}
    out["messages"] = messages
    if "tools" in body:
        out["tools"] = chat_tools(body["tools"])
    return out, unknown


def normalise_exchanges(
    requests: dict[int, dict[str, Any]], outcomes: dict[int, dict[str, Any]]
) -> list[tuple[str, str]]:
    """Rewrite every Messages exchange of a raw log into chat shape, in place.

    Request records get a chat ``body`` and ``api: "messages"``; outcome records
    a chat-shaped ``response``. Returns (kind, text) problems: the blocks the
    mapping does not know.
    """
    problems: list[tuple[str, str]] = []
    for index in sorted(requests):
        req = requests[index]
        body = req.get("body")
        if not is_messages_path(req.get("path")) or not isinstance(body, dict):
            continue
        server = req.get("server")
        merged = isinstance(server, dict) and server.get("inline_system") == "merged"
        req["body"], unknown = chat_body(body, merged)
        req["api"] = "messages"
        if unknown:
            problems.append(
                (ITEM_PROBLEM, f"request {index}: blocks not mapped: {', '.join(unknown)}")
            )
        out = outcomes.get(index)
        if out is None:
            continue
        out["response"], unknown = chat_response(out.get("response"))
        if unknown:
            problems.append(
                (ITEM_PROBLEM, f"response {index}: blocks not mapped: {', '.join(unknown)}")
            )
    return problems


class MessagesAdapter:
    """The Messages API: generations in chat shape, a typed event stream, no token ids."""

    name = "messages"
    routes = ROUTES
    generation = True
    end_markers = (END_EVENT.encode(),)
    usage_on_request = False
    tokens = False
    chat_template = False
    #: the Messages API as vLLM reads it: no penalties, min_p, seed or logit_bias
    sampling_fields: Mapping[str, tuple[str, ...]] = MappingProxyType({})
    sampling_keys = frozenset({"temperature", "top_p", "top_k", "max_tokens"})

    def is_end_event(self, payload: str) -> bool:
        if END_EVENT not in payload:
            return False
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return False
        return isinstance(event, dict) and event.get("type") == END_EVENT

    def claims_event(self, etype: str) -> bool:
        return etype in EVENTS

    def stream_folder(self) -> MessageStream:
        return MessageStream()

    def judge(self, response: dict[str, Any]) -> tuple[bool, str | None] | None:
        if response.get("type") != "message":  # a chat-shaped one is judged as chat
            return None
        stop = response.get("stop_reason")
        if stop not in FINISH_REASONS:
            return False, f"stop_reason {stop!r}"
        return True, None

    def to_chat(
        self, requests: dict[int, dict[str, Any]], outcomes: dict[int, dict[str, Any]]
    ) -> list[tuple[str, str]]:
        return normalise_exchanges(requests, outcomes)

    def request_messages(self, body: dict[str, Any]) -> list[Any] | None:
        return chat_messages(body)[0]

    def function_tool(self, tool: dict[str, Any]) -> dict[str, Any] | None:
        if "input_schema" not in tool or not isinstance(tool.get("name"), str):
            return None
        fn = {k: v for k, v in tool.items() if k not in ("input_schema", "type", "cache_control")}
        return {**fn, "parameters": tool["input_schema"]}

    def render_tool(self, tool: dict[str, Any], model: Any) -> list[dict[str, Any]] | None:
        return None

    def error_body(self, status: int, message: str, kind: str) -> bytes:
        return messages_proxy_error(status, message)

    def error_event(self, status: int, message: str, kind: str, sent: int) -> bytes:
        return messages_error_event(status, message)


ADAPTER: WireApi = MessagesAdapter()
