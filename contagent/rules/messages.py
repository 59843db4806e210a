"""Rules on single messages and responses: consumption keys, reasoning, tool arguments,
the tool union and conversation extension; and the kinds a row may name. Completeness,
which the recorder labels each outcome with, is defined beside the records
(:func:`contagent.rawlog.records.completeness`) and used from there."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from contagent.rules.history import (
    Problem,
    history_keys,
    message_calls,
    message_problems,
)
from contagent.wire.chat import (
    CallKey,
    call_name,
    legacy_function_call,
    message_text,
    tool_calls,
)

# ---------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------

#: Tools whose call ends the agent's run: a response calling one is "safe" to keep
#: even when no later request consumes it.
TERMINAL_TOOLS = frozenset({"finish"})

#: Why a rollout is not training-ready (a row's ``not_ready_kinds``).
NotReadyKind = Literal[
    "index_gap",
    "no_outcome",
    "no_request",
    "duplicate_record",
    "torn_line",
    "corrupt_log",
    "consumed_incomplete",
    "missing_usage",
    "tool_protocol",
    "unanswered_tool_call",
    "partial_execution",
    "ambiguous_call_id",
    "bad_tool_arguments",
    "non_text_content",
    "legacy_function_call",
    "unreadable_request",
    "tool_conflict",
    "unknown_tool",
    "reasoning_conflict",
    "no_steps",
    "truncated",
    "responses_chain",
    "unsupported_item",
    "translation_mismatch",
    "oracle",
]

#: Excluded-exchange reasons. The first six are the contract of the export; the
#: others cover records a crash, a non-chat route or an unreadable body leaves behind.
ExcludedReason = Literal[
    "incomplete",
    "http_error",
    "upstream_error",
    "abandoned",
    "duplicate_retry",
    "unconsumed",
    "no_outcome",
    "no_request",
    "unsupported_route",
    "unreadable_request",
]

#: A response's consumption key: ("calls", identities) or ("text", canonical text).
Key = tuple[str, Any]


def consumption_key(message: dict[str, Any]) -> Key:
    """Consumption by identity: what a later request must carry for ``message`` to count as consumed.

    Tool calls by identity (id, function name and canonical arguments: ids repeat
    across calls in some models and retries), text answers by canonical text
    (string and list-of-parts content compare equal).
    """
    calls = message_calls(message)
    if calls:
        return ("calls", calls)
    return ("text", message_text(message.get("content")))


def carries(key: Key, calls: frozenset[CallKey] | set[CallKey], texts: Any) -> bool:
    kind, value = key
    if kind == "calls":
        return bool(value) and value <= calls
    return value in texts


def is_safe(message: dict[str, Any]) -> bool:
    """Safe ending: plain text, or a call of a terminal tool such as ``finish``."""
    if legacy_function_call(message) is not None:
        return False
    calls = tool_calls(message)
    return not calls or all(call_name(c) in TERMINAL_TOOLS for c in calls)


def response_problems(message: dict[str, Any], index: int) -> list[Problem]:
    """What makes a response unfit for a training row (fail closed)."""
    return message_problems(message, f"response {index}")


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def apply_reasoning_policy(message: dict[str, Any], drop: bool) -> dict[str, Any]:
    """Reasoning policy: keep reasoning as ``reasoning_content`` (or drop it), never with ``<think>`` text.

    vLLM >= 0.11 names the field ``reasoning``; it is kept under the older name
    ``reasoning_content``. A leading ``<think>...</think>`` block in string
    content moves to ``reasoning_content`` when the server gave none, and is
    removed otherwise.
    """
    out = dict(message)
    if "reasoning" in out:
        alias = out.pop("reasoning")
        if not out.get("reasoning_content") and alias:
            out["reasoning_content"] = alias
    content = out.get("content")
    if isinstance(content, str) and content.lstrip().startswith(_THINK_OPEN):
        stripped = content.lstrip()
        end = stripped.find(_THINK_CLOSE)
        if end != -1:
            thought = stripped[len(_THINK_OPEN) : end].strip()
            out["content"] = stripped[end + len(_THINK_CLOSE) :].lstrip("\n")
            if not out.get("reasoning_content"):
                out["reasoning_content"] = thought
    if drop:
        out.pop("reasoning_content", None)
    elif "reasoning_content" in out and not out["reasoning_content"]:
        out.pop("reasoning_content")
    return out


def has_think_conflict(message: dict[str, Any]) -> bool:
    """``<think>`` text left in content (not a leading block the policy can move) beside
    reasoning, or two different reasoning texts under both names: the reasoning policy forbids both."""
    both = message.get("reasoning_content"), message.get("reasoning")
    if all(isinstance(r, str) and r for r in both) and both[0] != both[1]:
        return True
    kept = apply_reasoning_policy(message, drop=False)
    return bool(kept.get("reasoning_content")) and _THINK_OPEN in message_text(kept.get("content"))


def _tool_key(tool: Any) -> str | None:
    """A function tool's name; ``<type>:<name>`` (or the type) for other kinds of tool."""
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    if isinstance(fn, dict):
        name = fn.get("name")
        return name if isinstance(name, str) else None
    kind, name = tool.get("type"), tool.get("name")
    if not isinstance(kind, str) or kind == "function":
        return None
    return f"{kind}:{name}" if isinstance(name, str) else kind


def tool_union(tool_lists: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Tool union: union of tool definitions keyed by function name (type and name for other
    kinds, e.g. a Responses ``namespace`` or ``web_search``); returns (tools, conflicts)."""
    by_name: dict[str, dict[str, Any]] = {}
    conflicts: list[str] = []
    for tools in tool_lists:
        if not isinstance(tools, list):
            continue
        for tool in tools:
            name = _tool_key(tool)
            if not isinstance(name, str):
                conflicts.append("tool definition without a function name")
                continue
            seen = by_name.get(name)
            if seen is None:
                by_name[name] = tool
            elif seen != tool and name not in conflicts:
                conflicts.append(name)
    return list(by_name.values()), conflicts


def branch_tools(steps: Iterable[tuple[int, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The tool union per branch: the union of the tools of each branch's requests, from
    ``(branch, request body)`` pairs in step order."""
    lists: dict[int, list[Any]] = {}
    for branch, body in steps:
        lists.setdefault(branch, []).append(body.get("tools") if isinstance(body, dict) else None)
    return {b: tool_union(tools)[0] for b, tools in lists.items()}


def extends(prev_request: list[Any], prev_response: dict[str, Any], request: list[Any]) -> bool:
    """Does ``request`` continue the conversation of a step (its request + its response)?"""
    n = len(prev_request)
    if len(request) <= n:
        return False
    replay = request[n]
    if not isinstance(replay, dict) or replay.get("role") != "assistant":
        return False
    calls, texts = history_keys([replay])
    if not carries(consumption_key(prev_response), calls, texts):
        return False
    return request[:n] == prev_request
