"""A Messages request as the chat-completions request vLLM 0.32's Messages server builds.

vLLM serves ``/v1/messages`` by turning the request into a chat-completions request and
running its chat path (``AnthropicServingMessages.to_chat_completion_request``). Sending
the same chat request to ``/v1/chat/completions`` therefore renders the same prompt and
samples the same way, and there the server returns token ids. The rules, as vLLM has them:

- ``system`` (a string or text blocks) -> one leading system message, text blocks joined
  with no separator; a block starting ``x-anthropic-billing-header`` (Claude Code's
  per-request hash) is left out;
- a ``role: "system"`` message inside ``messages`` -> a system message at its place, or,
  when the served template refuses a system message after the first turn
  (``merge_inline_system``, which vLLM decides by rendering the template), appended to
  the leading one;
- text blocks -> content (one text block: a string; more: text parts); ``thinking`` ->
  ``reasoning``; ``redacted_thinking`` and ``tool_reference`` blocks are dropped;
  ``tool_use`` -> a tool call with ``json.dumps(input)`` arguments; a user's
  ``tool_result`` -> a ``tool`` message (its text items joined with ``"\\n"``; tool
  references named in it -> a second ``tool`` message of ``tool_reference`` parts); an
  assistant's ``tool_result`` -> a ``Tool result: ...`` text part;
- a user message left with no content is dropped;
- ``max_tokens`` -> ``max_tokens`` and ``max_completion_tokens``; ``stop_sequences`` ->
  ``stop``; ``temperature``, ``top_p``, ``top_k`` and vLLM's own extras as they are;
  ``metadata`` and unknown fields are dropped;
- ``output_config.effort`` -> ``reasoning_effort``, its JSON ``format`` -> a
  ``json_schema`` ``response_format``; ``thinking: disabled`` -> ``reasoning_effort`` as
  probed (``none``, or ``low`` for a template that cannot turn thinking off), ``enabled``
  -> ``thinking_token_budget``;
- a stream asks for usage on every chunk (``include_usage``, ``continuous_usage_stats``),
  which the Messages events are built from;
- ``tool_choice`` ``auto``/``any``/``none``/``tool`` -> ``auto``/``required``/``none``/a
  named function, ``parallel_tool_calls`` from ``disable_parallel_tool_use``; tools ->
  function tools (``input_schema`` typed ``object`` when it says no type), after the
  ``tool_addition``/``tool_removal`` blocks of system messages are applied.

Refused (:class:`Untranslatable`): images (in content or a tool result), block types vLLM
does not know, and shapes vLLM's request model rejects. An empty ``tools`` list is refused
too: the chat route rejects it, while vLLM's Messages route renders it as no tools.
"""

from __future__ import annotations

import json
import time
from typing import Any

from contagent.wire.translate import Untranslatable
from contagent.wire.translate.anthropic_tools import chat_tool, resolved_tools, set_tool_choice

#: Claude Code's attribution header, which vLLM leaves out of the system prompt.
BILLING_HEADER = "x-anthropic-billing-header"

#: Block types vLLM's Messages request model accepts.
KNOWN_BLOCKS = frozenset(
    {
        "text",
        "image",
        "tool_use",
        "tool_result",
        "tool_reference",
        "thinking",
        "redacted_thinking",
        "tool_addition",
        "tool_removal",
    }
)

#: Efforts ``output_config.effort`` takes.
EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})

#: Request fields vLLM copies onto the chat request as they are.
PASSED_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "watermarking",
    "cache_salt",
    "kv_transfer_params",
    "ec_transfer_params",
    "vllm_xargs",
    "chat_template_kwargs",
)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        raise Untranslatable(f"{where}: content must be a string or a list of blocks")
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise Untranslatable(f"{where}: a content block is not an object with a type")
        kind = block["type"]
        if kind not in KNOWN_BLOCKS:
            raise Untranslatable(f"{where}: block type {kind!r} is not translated")
        if kind == "image":
            raise Untranslatable(f"{where}: images are not translated (text-only token route)")
    return content


def _system_text(content: Any, where: str) -> str | None:
    """A system message's text, billing headers left out (None: nothing left)."""
    if isinstance(content, str):
        return None if content.startswith(BILLING_HEADER) else content
    parts = [
        b["text"]
        for b in _blocks(content, where)
        if b["type"] == "text"
        and isinstance(b.get("text"), str)
        and b["text"]
        and not b["text"].startswith(BILLING_HEADER)
    ]
    return "".join(parts) if parts else None


def _system(body: dict[str, Any], merge_inline_system: bool) -> list[dict[str, Any]]:
    parts: list[str] = []
    system = body.get("system")
    if isinstance(system, str) and system:
        parts.append(system)
    elif system:
        for block in _blocks(system, "system"):
            if block["type"] in ("tool_addition", "tool_removal"):
                raise Untranslatable(f"system: {block['type']} blocks belong in messages")
            text = block.get("text")
            if block["type"] == "text" and isinstance(text, str) and text:
                if not text.startswith(BILLING_HEADER):
                    parts.append(text)
    if merge_inline_system:
        for i, message in enumerate(body["messages"]):
            if message["role"] == "system":
                text = _system_text(message["content"], f"messages[{i}]")
                if text:
                    parts.append(text)
    return [{"role": "system", "content": "".join(parts)}] if parts else []


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": block.get("id") or f"call_{int(time.time())}",
        "type": "function",
        "function": {
            "name": block.get("name") or "",
            "arguments": json.dumps(block.get("input") or {}),
        },
    }


def _user_tool_result(block: dict[str, Any], where: str) -> list[dict[str, Any]]:
    content = block.get("content")
    text = ""
    references: list[dict[str, Any]] = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        for item in content:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text":
                texts.append(item.get("text", ""))
            elif item.get("type") == "image":
                raise Untranslatable(f"{where}: images in a tool result are not translated")
            elif item.get("type") == "tool_reference":
                name = item.get("tool_name") or item.get("name")
                if name:
                    references.append({"type": "tool_reference", "name": name})
        text = "\n".join(texts)
    call_id = block.get("tool_use_id") or ""
    out = [{"role": "tool", "tool_call_id": call_id, "content": text or ""}]
    if references:
        out.append({"role": "tool", "tool_call_id": call_id, "content": references})
    return out


def _message(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """A user or assistant message: the tool messages its tool results make, then itself."""
    role = message["role"]
    out: dict[str, Any] = {"role": role}
    content = message["content"]
    if isinstance(content, str):
        out["content"] = content
        return [out]
    before: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in _blocks(content, where):
        kind = block["type"]
        if kind in ("tool_addition", "tool_removal"):
            raise Untranslatable(f"{where}: {kind} blocks are only allowed in system messages")
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and block.get("thinking") is not None:
            reasoning.append(block["thinking"])
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        elif kind == "tool_result" and role == "user":
            before.extend(_user_tool_result(block, where))
        elif kind == "tool_result":
            result = block.get("content")
            parts.append({"type": "text", "text": f"Tool result: {str(result) if result else ''}"})
    if reasoning:
        out["reasoning"] = "".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    if parts:
        one_text = len(parts) == 1
        out["content"] = parts[0]["text"] if one_text else parts
    if role == "user" and "content" not in out:
        return before
    return [*before, out]


def chat_messages(body: dict[str, Any], merge_inline_system: bool) -> list[dict[str, Any]]:
    """The chat messages vLLM renders for a Messages request (checked by :func:`_check`)."""
    out = _system(body, merge_inline_system)
    for i, message in enumerate(body["messages"]):
        if message["role"] != "system":
            out.extend(_message(message, f"messages[{i}]"))
        elif not merge_inline_system:
            text = _system_text(message["content"], f"messages[{i}]")
            if text:
                out.append({"role": "system", "content": text})
    return out


def _reasoning(body: dict[str, Any], out: dict[str, Any], disabled_effort: str) -> None:
    config = body.get("output_config")
    if isinstance(config, dict):
        fmt = config.get("format")
        if isinstance(fmt, dict) and fmt.get("schema") is not None:
            kind = fmt.get("type", "json_schema")
            out["response_format"] = {
                "type": kind,
                "json_schema": {"name": kind, "schema": fmt["schema"]},
            }
        effort = config.get("effort")
        if effort is not None:
            if effort not in EFFORTS:
                raise Untranslatable(f"output_config.effort {effort!r} is not one vLLM takes")
            out["reasoning_effort"] = effort
    thinking = body.get("thinking")
    if thinking is None:
        return
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "disabled":
        out["reasoning_effort"] = disabled_effort
    elif kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024 or budget >= body["max_tokens"]:
            raise Untranslatable(
                "thinking.budget_tokens must be at least 1024 and less than max_tokens"
            )
        out["thinking_token_budget"] = budget
    elif kind != "adaptive":
        raise Untranslatable(f"thinking type {kind!r} is not translated")


def _check(body: Any) -> dict[str, Any]:
    """The request's shape as vLLM's request model requires it; one line when not."""
    if not isinstance(body, dict):
        raise Untranslatable("the request body is not a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Untranslatable("model is required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
        raise Untranslatable("max_tokens must be a positive integer")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Untranslatable("messages must be a list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in (
            "user",
            "assistant",
            "system",
        ):
            raise Untranslatable(f"messages[{i}]: role must be user, assistant or system")
        if not isinstance(message.get("content"), (str, list)):
            raise Untranslatable(f"messages[{i}]: content must be a string or a list of blocks")
        if isinstance(message["content"], list):
            _blocks(message["content"], f"messages[{i}]")
    stop = body.get("stop_sequences")
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise Untranslatable("stop_sequences must be a list of strings")
    return body


def to_chat_request(
    body: Any, *, merge_inline_system: bool = False, disabled_thinking_effort: str = "none"
) -> dict[str, Any]:
    """The chat-completions request vLLM 0.32 builds for the Messages request ``body``.

    ``merge_inline_system`` and ``disabled_thinking_effort`` are what vLLM decides by
    probing the served template (:mod:`contagent.wire.translate.template_probe` does the same).
    """
    body = _check(body)
    out: dict[str, Any] = {
        "model": body["model"],
        "messages": chat_messages(body, merge_inline_system),
        "max_tokens": body["max_tokens"],
        "max_completion_tokens": body["max_tokens"],
    }
    # vLLM passes a missing stop_sequences on as null, not as the chat default []
    out["stop"] = body.get("stop_sequences")
    out.update((k, body[k]) for k in PASSED_FIELDS if body.get(k) is not None)
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    _reasoning(body, out, disabled_thinking_effort)
    set_tool_choice(body.get("tool_choice"), out)
    tools = resolved_tools(body)
    if tools is not None:
        if not tools:
            raise Untranslatable(
                "an empty tools list is not translated (the chat route refuses it)"
            )
        out.setdefault("tool_choice", "auto")
        out["tools"] = [chat_tool(t) for t in tools]
    return out


def merged_system(body: Any) -> str | None:
    """The leading system prompt vLLM renders when it merges the system messages inside
    ``messages`` into it (None: there is none); raises :class:`Untranslatable` for a body
    vLLM would refuse."""
    system = _system(_check(body), merge_inline_system=True)
    return system[0]["content"] if system else None
