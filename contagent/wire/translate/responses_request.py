"""A Responses request as a chat-completions request that renders the prompt vLLM 0.32's
Responses server renders for it.

vLLM's Responses server builds chat messages from the input items
(``vllm/entrypoints/openai/responses/utils.py``) and renders them with the chat template,
the function tools and the request's template arguments, as the chat route does. The rules:

- ``instructions`` -> a leading system message; ``input`` as a string -> one user message;
- a message item with a role other than assistant -> that message, its ``input_text``
  parts as ``text`` parts (vLLM's renderer reads both as the same text);
- an assistant message -> its first part's text as ``content``; a ``reasoning`` item -> its
  first content text (or first summary text) as ``reasoning``; a ``function_call`` -> a tool
  call (a namespaced one named ``<namespace>__<name>``); a ``custom_tool_call`` -> a tool
  call whose arguments are ``{"input": <its input>}``. Each of these joins the assistant
  message before it where that message lacks the field, as vLLM merges them;
- ``function_call_output`` / ``custom_tool_call_output`` -> a ``tool`` message;
- tools: ``function`` tools as chat function tools; a ``namespace`` tool's functions
  flattened to ``<namespace>__<name>``; a ``custom`` tool as a function taking one string
  ``input``; built-in tools (``web_search``, ``file_search``, ...) are dropped, as vLLM
  never shows them to a chat-template model;
- ``reasoning.effort`` -> ``reasoning_effort``; ``max_output_tokens`` -> ``max_tokens``;
  sampling fields as they are; ``text.format`` -> ``response_format``; a last assistant
  message or reasoning item still ``in_progress``/``incomplete`` -> continue it
  (``continue_final_message``).

Refused (:class:`Untranslatable`): ``previous_response_id`` (the proxy does not store
responses), ``background``, ``prompt``, encrypted reasoning, custom tools with a grammar
format (vLLM refuses them too), images and files, output
logprobs (``include: ["message.output_text.logprobs"]``), a ``tool_choice`` other than
``auto``/``none``/``required``/a named function, and item types vLLM does not read.
"""

from __future__ import annotations

import json
from typing import Any

from contagent.wire.translate import Untranslatable

#: vLLM's separator between a namespace and a tool name.
NAMESPACE_SEPARATOR = "__"

#: The key a custom tool's free-form input is wrapped under.
CUSTOM_INPUT_KEY = "input"

#: Request fields copied onto the chat request as they are.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "stop_token_ids",
    "logit_bias",
    "ignore_eos",
    "skip_special_tokens",
    "include_stop_str_in_output",
    "include_reasoning",
    "parallel_tool_calls",
    "structured_outputs",
    "vllm_xargs",
    "chat_template_kwargs",
    "cache_salt",
    "watermarking",
    "kv_transfer_params",
    "ec_transfer_params",
)

#: Part types that carry text.
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})

#: Part types that carry no text: refused.
MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio"})


def custom_tool_parameters() -> dict[str, Any]:
    """The schema of the one-string function a custom tool is shown as."""
    return {
        "type": "object",
        "properties": {
            CUSTOM_INPUT_KEY: {
                "type": "string",
                "description": "The freeform text payload for this tool.",
            }
        },
        "required": [CUSTOM_INPUT_KEY],
        "additionalProperties": False,
    }


def _function(tool: dict[str, Any], name: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """The function tools the model is shown, in request order."""
    if not isinstance(tools, list):
        raise Untranslatable("tools must be a list")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise Untranslatable(f"tools[{i}] is not an object with a type")
        if tool["type"] == "function":
            out.append(_function(tool, str(tool.get("name"))))
        elif tool["type"] == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and inner.get("type") == "function":
                    flat = f"{tool.get('name')}{NAMESPACE_SEPARATOR}{inner.get('name')}"
                    out.append(_function(inner, flat))
        elif tool["type"] == "custom":
            fmt = tool.get("format")
            if isinstance(fmt, dict) and fmt.get("type") == "grammar":
                raise Untranslatable(
                    f"tools[{i}]: custom tools with a grammar format are not supported (vLLM refuses them too)"
                )
            shim = {"description": tool.get("description"), "parameters": custom_tool_parameters()}
            out.append(_function(shim, str(tool.get("name"))))
    return out


def _text_parts(item: dict[str, Any], where: str) -> None:
    content = item.get("content")
    if isinstance(content, list):
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in MEDIA_PARTS:
                raise Untranslatable(
                    f"{where}: {kind} parts are not translated (text-only token route)"
                )


def _role_message(item: dict[str, Any]) -> dict[str, Any]:
    """A user, system or developer message as the chat route takes it: the ``input_text``
    parts vLLM's renderer reads as text become ``text`` parts (the chat route's request
    model refuses the Responses part types), the item's ``type`` key is left out."""
    content = item.get("content")
    if isinstance(content, list):
        content = [
            {"type": "text", "text": part.get("text", "")}
            if isinstance(part, dict) and part.get("type") in TEXT_PARTS
            else part
            for part in content
        ]
    return {k: v for k, v in {**item, "content": content}.items() if k != "type"}


def _tool_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
        raise Untranslatable(f"{where}: a {item.get('type')} needs a call_id and a name")
    name = item["name"]
    if item["type"] == "custom_tool_call":
        arguments = json.dumps({CUSTOM_INPUT_KEY: item.get("input") or ""}, ensure_ascii=False)
    else:
        if not isinstance(item.get("arguments"), str):
            raise Untranslatable(f"{where}: a function_call needs its arguments as a string")
        arguments = item["arguments"]
        if item.get("namespace"):
            name = f"{item['namespace']}{NAMESPACE_SEPARATOR}{name}"
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    if item.get("encrypted_content"):
        raise Untranslatable(f"{where}: encrypted reasoning is not translated")
    content, summary = item.get("content"), item.get("summary")
    if isinstance(content, list) and content:
        return str(content[0].get("text", ""))
    if isinstance(summary, list) and summary:
        return str(summary[0].get("text", ""))
    return ""


def _assistant_text(item: dict[str, Any]) -> str | None:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None


def _merge(messages: list[dict[str, Any]], field: str, value: Any) -> None:
    """Put ``field`` on the assistant message before, where it lacks it; else a new one."""
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "assistant":
        if field == "tool_calls" and isinstance(last.get("tool_calls"), list):
            last["tool_calls"].append(value)
            return
        if last.get(field) is None:
            last[field] = [value] if field == "tool_calls" else value
            return
    messages.append({"role": "assistant", field: [value] if field == "tool_calls" else value})


def _item(messages: list[dict[str, Any]], item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise Untranslatable(f"{where}: an input item is not an object")
    kind = item.get("type")
    if kind in ("function_call", "custom_tool_call"):
        _merge(messages, "tool_calls", _tool_call(item, where))
    elif kind == "reasoning":
        _merge(messages, "reasoning", _reasoning_text(item, where))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        messages.append(
            {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
        )
    elif item.get("role") == "assistant" and kind in (None, "message"):
        _text_parts(item, where)
        text = _assistant_text(item)
        if text is None:
            raise Untranslatable(f"{where}: an assistant message without text is not translated")
        _merge(messages, "content", text)
    elif isinstance(item.get("role"), str) and kind in (None, "message"):
        _text_parts(item, where)
        messages.append(_role_message(item))
    else:
        raise Untranslatable(f"{where}: input item type {kind!r} is not translated")


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages vLLM renders for a Responses request's instructions and input."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    if not isinstance(items, list):
        raise Untranslatable("input must be a string or a list of items")
    for i, item in enumerate(items):
        _item(messages, item, f"input[{i}]")
    return messages


def _tool_choice(choice: Any, tools: list[dict[str, Any]]) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("name"), str)
    ):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise Untranslatable(f"tool_choice {json.dumps(choice)[:80]} is not translated")


def _continues(items: Any) -> bool:
    """Is the last input item an assistant message or reasoning still being written?"""
    if not isinstance(items, list) or not items or not isinstance(items[-1], dict):
        return False
    last = items[-1]
    if last.get("type", "message") not in ("message", "reasoning"):
        return False
    return last.get("status") in ("in_progress", "incomplete")


def _refuse(body: dict[str, Any]) -> None:
    for field, why in (
        (
            "previous_response_id",
            "the proxy stores no responses; send the whole conversation as input",
        ),
        ("background", "background responses are not translated"),
        ("prompt", "prompt templates are not supported"),
        ("previous_input_messages", "previous_input_messages are not translated"),
    ):
        if body.get(field):
            raise Untranslatable(f"{field}: {why}")
    include = body.get("include") or []
    if "message.output_text.logprobs" in include or body.get("top_logprobs"):
        raise Untranslatable(
            "output logprobs (include message.output_text.logprobs) are not translated"
        )


def _text_format(body: dict[str, Any], out: dict[str, Any]) -> None:
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return
    if fmt["type"] == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif fmt["type"] == "json_schema" and fmt.get("schema") is not None:
        out["structured_outputs"] = {"json": fmt["schema"]}
    else:
        raise Untranslatable(f"text.format type {fmt['type']!r} is not translated")


def to_chat_request(body: Any) -> dict[str, Any]:
    """The chat-completions request that renders and samples as vLLM's Responses route does."""
    if not isinstance(body, dict):
        raise Untranslatable("the request body is not a JSON object")
    _refuse(body)
    out: dict[str, Any] = {"model": body.get("model"), "messages": chat_messages(body)}
    if out["model"] is None:
        del out["model"]
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    out.update((k, body[k]) for k in SAMPLING_FIELDS if body.get(k) is not None)
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        out["reasoning_effort"] = reasoning["effort"]
    if _continues(body.get("input")):
        out["add_generation_prompt"] = False
        out["continue_final_message"] = True
    _text_format(body, out)
    tools = chat_tools(body.get("tools") or [])
    if tools:
        out["tools"] = tools
        out["tool_choice"] = _tool_choice(body.get("tool_choice", "auto"), tools)
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out
