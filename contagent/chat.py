"""Reading OpenAI chat requests and responses, as pure functions: no IO, no logging, no state.

Accessors for what a message or response carries (text, tool calls, usage,
finish reason), and the scan of one request's messages that the selection
rules in :mod:`contagent.rules` build on: rule 4's fragment repair, the history
keys rule 2 matches answers against, and the tool protocol. Nothing here
decides what an export keeps; that is the rules' job.
"""

from __future__ import annotations

from dataclasses import dataclass
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


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def call_name(call: dict[str, Any]) -> str | None:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


# ---------------------------------------------------------------------------
# One request's history (rule 4, the request half of rule 2, the tool protocol)
# ---------------------------------------------------------------------------


def merge_tool_fragments(messages: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """Rule 4: merge adjacent ``role: tool`` messages that share a ``tool_call_id``.

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


def history_keys(messages: list[Any]) -> tuple[set[str], set[str]]:
    """Tool-call ids and canonical texts of the assistant messages in a request's history."""
    ids, texts, _ = _scan(messages, 0, set())
    return ids, texts


def tool_protocol_problems(messages: list[Any]) -> list[str]:
    """Tool calls only on assistant messages; each tool message answers a pending call."""
    return _scan(messages, 0, set())[2]


# ---------------------------------------------------------------------------
# Incremental scan of a rollout's requests (the exporter's hot path)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Scan:
    """Rules 2 and 4 and the tool protocol, applied to one request's messages.

    Agents resend the whole history each step; :func:`scan_request` reuses the
    scan of the previous request when the new one starts with the same raw
    messages, so a rollout costs time linear in what each request adds.
    """

    raw: list[Any]
    repaired: list[Any]
    repairs: tuple[dict[str, Any], ...]
    ids: frozenset[str]
    texts: frozenset[str]
    pending: frozenset[str]
    problems: tuple[str, ...]


def _scan(
    messages: list[Any], start: int, pending: set[str]
) -> tuple[set[str], set[str], list[str]]:
    ids: set[str] = set()
    texts: set[str] = set()
    problems: list[str] = []
    for pos, msg in enumerate(messages, start=start):
        if not isinstance(msg, dict):
            problems.append(f"message {pos} is not an object")
            continue
        role = msg.get("role")
        calls = msg.get("tool_calls")
        if calls and role != "assistant":
            problems.append(f"message {pos} ({role}) carries tool_calls")
        if role == "assistant":
            found = [str(c.get("id")) for c in tool_calls(msg)]
            if found:
                ids.update(found)
                pending.update(found)
            else:
                texts.add(message_text(msg.get("content")))
        elif role == "tool":
            tcid = msg.get("tool_call_id")
            if tcid not in pending:
                problems.append(f"tool message {pos} answers no pending call ({tcid!r})")
            pending.discard(tcid)
    return ids, texts, problems


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
        ids, texts, problems = _scan(fixed, len(prev.repaired), pending)
        return Scan(
            messages,
            prev.repaired + fixed,
            prev.repairs + tuple(repairs),
            prev.ids | ids,
            prev.texts | texts,
            frozenset(pending),
            prev.problems + tuple(problems),
        )
    fixed, repairs = merge_tool_fragments(messages)
    pending = set()
    ids, texts, problems = _scan(fixed, 0, pending)
    return Scan(
        messages,
        fixed,
        tuple(repairs),
        frozenset(ids),
        frozenset(texts),
        frozenset(pending),
        tuple(problems),
    )
