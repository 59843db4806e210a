"""Reading OpenAI chat requests and responses, as pure functions: no IO, no logging, no state.

Accessors for what a message or response carries (text, tool calls, usage,
finish reason). Nothing here decides what an export keeps; that is
:mod:`contagent.rules`' job.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: what :func:`usage_counts` returns, and what the token identity (rule 8) sums.
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


def message_text(content: Any) -> str:
    """The text of a message ``content``: a string, or a list of ``{type: text}`` parts joined."""
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
        return "".join(parts)
    return str(content)


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
    """Normalise chat (prompt/completion) or Responses (input/output) usage; None if absent."""
    if not isinstance(usage, dict):
        return None
    prompt: Any = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion: Any = usage.get("completion_tokens", usage.get("output_tokens"))
    total: Any = usage.get("total_tokens")
    if not (_is_count(prompt) and _is_count(completion)):
        return None
    p, c = int(prompt), int(completion)
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": total if _is_count(total) else p + c,
    }


def sum_usage(usages: Iterable[dict[str, int] | None]) -> dict[str, int]:
    """Field-wise sum of normalised usage dicts (as :func:`usage_counts` returns); None adds 0."""
    total = dict.fromkeys(USAGE_FIELDS, 0)
    for usage in usages:
        if usage:
            for field in USAGE_FIELDS:
                total[field] += usage[field]
    return total


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def call_name(call: dict[str, Any]) -> str | None:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None
