"""Conversation branches rebuilt from a row's steps (pure functions, no IO).

The exporter uses these to write Prime-SFT rows and the validator uses them
to check that Parquet rows say exactly what the results rows say.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from contagent.rules import apply_reasoning_policy
from contagent.wire.chat import message_text, tool_calls


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


def branch_ids(steps: list[tuple[int, int | None]]) -> tuple[dict[int, int], int]:
    """The branches from each step's parent: ``(exchange_index, extends)`` in index order.

    A step whose parent it continues stays on the parent's branch when it is the
    parent's main line (the child with the longest chain of steps after it, the later
    one on a tie); any other child (a critic or summariser forking off, a restarted
    copy) starts a new branch, so a side call never cuts the main line. Branches are
    numbered in the order of their first step. Returns (branch of each step, count).
    """
    children: dict[int, list[int]] = {}
    for index, parent in steps:
        if parent is not None:
            children.setdefault(parent, []).append(index)
    height: dict[int, int] = {}
    for index, _ in reversed(steps):
        height[index] = 1 + max((height[c] for c in children.get(index, ())), default=0)
    main = {p: max(cs, key=lambda c: (height[c], c)) for p, cs in children.items()}
    branch: dict[int, int] = {}
    count = 0
    for index, parent in steps:
        if parent is not None and main[parent] == index:
            branch[index] = branch[parent]
        else:
            branch[index] = count
            count += 1
    return branch, count


class Turn(NamedTuple):
    """One message of a branch conversation and the step it comes from."""

    message: dict[str, Any]
    """The message in the Prime-SFT shape (:func:`to_wire`)."""
    step: int
    """exchange_index of the step that added it (its request or its response)."""
    branch: int
    """That step's branch: another branch's number on a forked branch's shared start."""
    response: bool
    """The model's own response in that step, not a message of its request."""


def branch_turns(steps: list[dict[str, Any]], drop_reasoning: bool) -> list[list[Turn]]:
    """Each branch as one conversation, from its root through its last step.

    A forked branch starts with the conversation of the step it forks from. Each
    later step's first added message replays the response of the step it extends;
    the model's own response (with its reasoning) stands in for that replay.
    Raises ``KeyError`` when a step extends a step that is not before it.
    """
    upto: dict[int, list[Turn]] = {}
    last: dict[int, int] = {}
    for step in steps:
        parent = step["extends"]
        added = step["messages"]
        index, branch = step["exchange_index"], step["branch"]
        base: list[Turn] = []
        if parent is not None:
            base = upto[parent]
            added = added[1:]  # the replayed response, already in ``base``
        upto[index] = [
            *base,
            *(Turn(to_wire(m, drop_reasoning), index, branch, False) for m in added),
            Turn(to_wire(step["response"], drop_reasoning), index, branch, True),
        ]
        last[branch] = index
    return [upto[last[b]] for b in sorted(last)]


def branch_conversations(
    steps: list[dict[str, Any]], drop_reasoning: bool
) -> list[list[dict[str, Any]]]:
    """Each branch's messages (:func:`branch_turns` without where each comes from)."""
    return [[t.message for t in turns] for turns in branch_turns(steps, drop_reasoning)]
