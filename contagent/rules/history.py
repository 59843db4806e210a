"""One request's history, as pure functions: fragment repair, the tool protocol and
what the history says the agent executed (the request half of consumption by identity).

Agents resend the whole history each step; :func:`scan_request` reuses the scan
of the previous request when the new one starts with the same raw messages, so a
rollout costs time linear in what each request adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from contagent.wire.chat import (
    CallKey,
    call_arguments,
    call_key,
    canonical_arguments,
    legacy_function_call,
    message_text,
    non_text_parts,
    tool_calls,
)

#: (not-ready kind, text) of one problem found in a request's history.
Problem = tuple[str, str]


def merge_tool_fragments(messages: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """Fragment repair: merge adjacent ``role: tool`` messages that share a ``tool_call_id``.

    Returns the repaired list (the input when nothing changed) and one repair
    record per merged run: ``{"tool_call_id", "fragments"}``.
    """
    repairs: list[dict[str, Any]] = []
    out: list[Any] | None = None
    i, n = 0, len(messages)
    while i < n:
        msg = messages[i]
        j = i + 1
        if isinstance(msg, dict) and msg.get("role") == "tool":
            tcid = msg.get("tool_call_id")
            while (
                j < n
                and isinstance(messages[j], dict)
                and messages[j].get("role") == "tool"
                and messages[j].get("tool_call_id") == tcid
            ):
                j += 1
        if j - i > 1:
            if out is None:
                out = list(messages[:i])
            merged = dict(msg)
            merged["content"] = "\n".join(message_text(m.get("content")) for m in messages[i:j])
            out.append(merged)
            repairs.append({"tool_call_id": msg.get("tool_call_id"), "fragments": j - i})
        elif out is not None:
            out.append(msg)
        i = j
    return (messages if out is None else out), repairs


def arguments_parse(arguments: Any) -> bool:
    """Tool-call ``arguments`` must be a string holding a JSON object."""
    try:
        return isinstance(arguments, str) and isinstance(orjson.loads(arguments), dict)
    except orjson.JSONDecodeError:
        return False


def message_calls(message: dict[str, Any]) -> frozenset[CallKey]:
    """The identities of the calls a message makes; a legacy ``function_call`` has id ``""``."""
    keys = {call_key(c) for c in tool_calls(message)}
    fc = legacy_function_call(message)
    if fc is not None:
        keys.add(("", str(fc.get("name")), canonical_arguments(fc.get("arguments"))))
    return frozenset(keys)


def message_problems(message: dict[str, Any], where: str) -> list[Problem]:
    """What makes one message unfit for a string-content training row."""
    problems: list[Problem] = []
    kinds = non_text_parts(message.get("content"))
    if kinds:
        problems.append(
            (
                "non_text_content",
                f"{where} has content parts that are not text ({', '.join(kinds)})",
            )
        )
    if legacy_function_call(message) is not None or message.get("role") == "function":
        problems.append(("legacy_function_call", f"{where} uses the legacy function_call protocol"))
    bad = [str(c.get("id")) for c in tool_calls(message) if not arguments_parse(call_arguments(c))]
    if bad:
        problems.append(
            (
                "bad_tool_arguments",
                f"{where}: tool call arguments are not a JSON object ({', '.join(bad)})",
            )
        )
    return problems


def _scan(
    messages: list[Any], start: int, pending: set[str]
) -> tuple[set[CallKey], set[str], list[Problem]]:
    calls: set[CallKey] = set()
    texts: set[str] = set()
    problems: list[Problem] = []
    for pos, msg in enumerate(messages, start=start):
        if not isinstance(msg, dict):
            problems.append(("tool_protocol", f"message {pos} is not an object"))
            continue
        role = msg.get("role")
        problems.extend(message_problems(msg, f"message {pos}"))
        if msg.get("tool_calls") and role != "assistant":
            problems.append(("tool_protocol", f"message {pos} ({role}) carries tool_calls"))
        if role == "assistant":
            if pending:
                left = ", ".join(sorted(pending))
                problems.append(
                    ("unanswered_tool_call", f"call {left} left unanswered before message {pos}")
                )
                pending.clear()
            found = message_calls(msg)
            if found:
                calls.update(found)
                ids = [str(c.get("id")) for c in tool_calls(msg)]
                if len(set(ids)) != len(ids):
                    problems.append(
                        ("ambiguous_call_id", f"message {pos} repeats a tool call id ({ids})")
                    )
                pending.update(ids)
            else:
                texts.add(message_text(msg.get("content")))
        elif role == "tool":
            tcid = msg.get("tool_call_id")
            if tcid not in pending:
                problems.append(
                    ("tool_protocol", f"tool message {pos} answers no pending call ({tcid!r})")
                )
            pending.discard(tcid)
    return calls, texts, problems


def history_keys(messages: list[Any]) -> tuple[set[CallKey], set[str]]:
    """Call identities and canonical texts of the assistant messages in a request's history."""
    calls, texts, _ = _scan(messages, 0, set())
    return calls, texts


def tool_protocol_problems(messages: list[Any]) -> list[Problem]:
    """Every problem of a request's history, including calls still unanswered at its end."""
    pending: set[str] = set()
    problems = _scan(messages, 0, pending)[2]
    return problems + end_problems(frozenset(pending))


def end_problems(pending: frozenset[str]) -> list[Problem]:
    if not pending:
        return []
    return [("unanswered_tool_call", f"call {', '.join(sorted(pending))} left unanswered")]


@dataclass(frozen=True)
class Scan:
    """Consumption by identity, fragment repair and the tool protocol, applied to one request's messages."""

    raw: list[Any]
    repaired: list[Any]
    repairs: tuple[dict[str, Any], ...]
    calls: frozenset[CallKey]
    texts: frozenset[str]
    pending: frozenset[str]
    problems: tuple[Problem, ...]

    @property
    def all_problems(self) -> list[Problem]:
        """The history's problems, with calls still unanswered when the request was sent."""
        return list(self.problems) + end_problems(self.pending)


def scan_request(messages: list[Any], prev: Scan | None) -> Scan:
    """Scan ``messages``; results equal a scan from scratch (a property test checks this)."""
    n = len(prev.raw) if prev is not None else 0
    first_new = messages[n] if len(messages) > n else None
    incremental = (
        prev is not None
        and len(messages) >= n
        and messages[:n] == prev.raw
        # a fragment continuing the previous request's last tool message spans the seam
        and not (
            isinstance(first_new, dict)
            and first_new.get("role") == "tool"
            and n
            and isinstance(prev.raw[-1], dict)
            and prev.raw[-1].get("role") == "tool"
            and prev.raw[-1].get("tool_call_id") == first_new.get("tool_call_id")
        )
    )
    if incremental:
        assert prev is not None
        fixed, repairs = merge_tool_fragments(messages[n:])
        pending = set(prev.pending)
        calls, texts, problems = _scan(fixed, len(prev.repaired), pending)
        return Scan(
            messages,
            prev.repaired + fixed,
            prev.repairs + tuple(repairs),
            prev.calls | calls,
            prev.texts | texts,
            frozenset(pending),
            prev.problems + tuple(problems),
        )
    fixed, repairs = merge_tool_fragments(messages)
    pending = set()
    calls, texts, problems = _scan(fixed, 0, pending)
    return Scan(
        messages,
        fixed,
        tuple(repairs),
        frozenset(calls),
        frozenset(texts),
        frozenset(pending),
        tuple(problems),
    )
