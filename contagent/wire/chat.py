"""Reading OpenAI chat requests and responses, as pure functions: no IO, no logging, no state.

Accessors for what a message or response carries (text, tool calls, usage,
finish reason). Nothing here decides what an export keeps; that is
:mod:`contagent.rules`' job.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

#: what :func:`usage_counts` returns, and what the token identity sums.
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")

#: Messages-API usage fields of prompt tokens counted apart from ``input_tokens``.
ANTHROPIC_CACHE_FIELDS = ("cache_creation_input_tokens", "cache_read_input_tokens")

#: content part types that carry text; any other part (image, audio, file) cannot
#: be written to a string-content training row.
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})

#: A tool call's identity: (id, function name, canonical arguments).
CallKey = tuple[str, str, str]


def route_ends_with(path: Any, routes: str | tuple[str, ...]) -> bool:
    """Does a request record's ``path`` name one of ``routes`` (a query string, a trailing
    slash and any base path before it allowed)?"""
    return isinstance(path, str) and path.partition("?")[0].rstrip("/").endswith(routes)


def message_text(content: Any) -> str:
    """The text of a message ``content``: a string, or its text parts joined with ``"\\n"``.

    vLLM renders list content for string-content chat templates by joining the
    text parts with a newline, so that is the text the model saw.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def non_text_parts(content: Any) -> list[str]:
    """The types of the parts of list ``content`` that are not text (image_url, input_audio, ...)."""
    if not isinstance(content, list):
        return []
    found = []
    for part in content:
        if isinstance(part, str):
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PART_TYPES or not isinstance(part.get("text"), str):
            found.append(str(kind))
    return found


def response_message(response: Any) -> dict[str, Any] | None:
    """The assistant message of a chat completion (first choice), or None."""
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return message
    return None


def finish_reason(response: Any) -> str | None:
    if isinstance(response, dict):
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            reason = choices[0].get("finish_reason")
            return reason if isinstance(reason, str) else None
    return None


def usage_counts(usage: Any) -> dict[str, int] | None:
    """Normalise chat (prompt/completion), Responses or Messages (input/output) usage.

    Messages usage counts the prompt's cached tokens apart: its prompt tokens are
    ``input_tokens`` plus ``cache_creation_input_tokens`` and ``cache_read_input_tokens``.
    None when absent or implausible: a count that is negative or not an integer,
    or a total that is not prompt + completion. Corrupt usage is treated as missing.
    """
    if not isinstance(usage, dict):
        return None
    prompt: Any = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion: Any = usage.get("completion_tokens", usage.get("output_tokens"))
    total: Any = usage.get("total_tokens")
    if not (_is_count(prompt) and _is_count(completion)):
        return None
    if "prompt_tokens" not in usage:
        for name in ANTHROPIC_CACHE_FIELDS:
            cached = usage.get(name)
            if cached is None:
                continue
            if not _is_count(cached):
                return None
            prompt += cached
    if total is None:
        total = prompt + completion
    elif not _is_count(total) or total != prompt + completion:
        return None
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def cached_tokens(usage: Any) -> int | None:
    """The prompt tokens a server says were cache hits (chat ``prompt_tokens_details``,
    Responses ``input_tokens_details``, Messages ``cache_read_input_tokens``), or None when
    it says nothing usable."""
    if not isinstance(usage, dict):
        return None
    if "cache_read_input_tokens" in usage:
        read = usage["cache_read_input_tokens"]
        return read if _is_count(read) else None
    details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if _is_count(value) else None


def sum_usage(usages: Iterable[dict[str, int] | None]) -> dict[str, int]:
    """Field-wise sum of normalised usage dicts (as :func:`usage_counts` returns); None adds 0."""
    total = dict.fromkeys(USAGE_FIELDS, 0)
    for usage in usages:
        if usage:
            for field in USAGE_FIELDS:
                total[field] += usage[field]
    return total


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def call_name(call: dict[str, Any]) -> str | None:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def call_arguments(call: dict[str, Any]) -> Any:
    function = call.get("function")
    return function.get("arguments") if isinstance(function, dict) else None


def canonical_arguments(arguments: Any) -> str:
    """Arguments as compact JSON with sorted keys, so key order and spacing do not matter.

    Unparseable argument strings are kept as they are (they then only match themselves).
    """
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    else:
        value = arguments
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(arguments)


def call_key(call: dict[str, Any]) -> CallKey:
    """A tool call's identity: what the agent must replay for the call to count as executed."""
    return (
        str(call.get("id")),
        str(call_name(call)),
        canonical_arguments(call_arguments(call)),
    )


def legacy_function_call(message: dict[str, Any]) -> dict[str, Any] | None:
    """The deprecated ``function_call`` of an assistant message, if it carries one."""
    fc = message.get("function_call")
    return fc if isinstance(fc, dict) else None


#: finish reasons that mean the model ended its turn on its own.
COMPLETE_FINISH_REASONS = frozenset({"stop", "tool_calls", "function_call"})

#: what an absent, null or empty ``parameters`` schema renders as.
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class Unrenderable(ValueError):
    """A tool whose rendering is not known; the message says which and why."""


def _parameters(value: Any, name: str) -> dict[str, Any]:
    if value is None or value == {}:
        return dict(EMPTY_PARAMETERS)
    if not isinstance(value, dict) or value.get("type") != "object":
        raise Unrenderable(f"tool {name!r} has a parameters schema that is not an object")
    return value


def rendered_function(fn: Any) -> dict[str, Any]:
    """A chat function tool with a name and an object ``parameters`` schema, from a function
    definition; raises :class:`Unrenderable`."""
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not name:
        raise Unrenderable("a function tool without a name")
    return {
        "type": "function",
        "function": {**fn, "parameters": _parameters(fn.get("parameters"), name)},
    }


def function_definition(tool: dict[str, Any]) -> dict[str, Any] | None:
    """The ``function`` of a chat function tool, None for a tool of another shape."""
    fn = tool.get("function")
    return fn if isinstance(fn, dict) and tool.get("type") in (None, "function") else None


def tool_phrase(tool: dict[str, Any]) -> str:
    """How an error names a tool that is not a function: by its type."""
    kind = tool.get("type")
    return f"a {kind!r} tool" if isinstance(kind, str) else "a tool of no type"
