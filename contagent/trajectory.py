"""Conversation branches rebuilt from a row's steps (pure functions, no IO).

The exporter uses these to write Prime-SFT rows and the validator uses them
to check that Parquet rows say exactly what the results rows say.
"""

from __future__ import annotations

from typing import Any

from contagent.chat import message_text, tool_calls
from contagent.rules import apply_reasoning_policy


def request_messages(steps: list[dict[str, Any]]) -> dict[int, list[Any]]:
    """The full (repaired) request messages of every step, keyed by exchange index.

    Raises ``KeyError``/``ValueError`` when a step extends a step that is not
    before it in the row; callers turn that into a violation.
    """
    full: dict[int, list[Any]] = {}
    for step in steps:
        parent = step["extends"]
        if parent is None:
            full[step["exchange_index"]] = list(step["messages"])
        else:
            if parent not in full:
                raise KeyError(parent)
            full[step["exchange_index"]] = full[parent] + list(step["messages"])
    return full


def to_wire(message: dict[str, Any], drop_reasoning: bool) -> dict[str, Any]:
    """One message in the Prime-SFT shape: string content, JSON-string arguments, fixed keys."""
    role = message.get("role")
    if role == "assistant":
        message = apply_reasoning_policy(message, drop_reasoning)
    calls = tool_calls(message) if role == "assistant" else []
    content = message.get("content")
    reasoning = message.get("reasoning_content") if role == "assistant" else None
    return {
        "role": role,
        "content": None if content is None and calls else message_text(content),
        "reasoning_content": reasoning if isinstance(reasoning, str) and reasoning else None,
        "tool_calls": [
            {
                "id": c.get("id"),
                "type": c.get("type") or "function",
                "function": {
                    "name": (c.get("function") or {}).get("name"),
                    "arguments": (c.get("function") or {}).get("arguments"),
                },
            }
            for c in calls
        ]
        or None,
        "tool_call_id": message.get("tool_call_id") if role == "tool" else None,
        "name": message.get("name") if role == "tool" else None,
    }


def branch_conversations(
    steps: list[dict[str, Any]], drop_reasoning: bool
) -> list[list[dict[str, Any]]]:
    """Each branch as one conversation, assistant turns taken from the responses.

    Within a branch, the history replays each earlier response as the first
    message a later step adds; the model's own response (with its reasoning)
    stands in for that replay.
    """
    branches: dict[int, list[dict[str, Any]]] = {}
    for step in steps:
        convo = branches.setdefault(step["branch"], [])
        added = step["messages"]
        if step["extends"] is not None:
            added = added[1:]  # the replayed response, already in ``convo``
        convo.extend(to_wire(m, drop_reasoning) for m in added)
        convo.append(to_wire(step["response"], drop_reasoning))
    return [branches[b] for b in sorted(branches)]
