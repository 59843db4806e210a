"""The selection rules, as pure functions: no IO, no logging, no state.

The exporter uses them to build rows and the validator uses them to check
rows; the proxy uses :func:`completeness` to label outcomes. Keep every rule
here, so that the three can never disagree; :mod:`contagent.chat` only reads
fields out of messages and responses.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from contagent.chat import call_name, message_text, response_message, tool_calls

#: finish reasons that mean the model ended its turn on its own.
COMPLETE_FINISH_REASONS = frozenset({"stop", "tool_calls", "function_call"})


def completeness(status: int | None, response: Any) -> tuple[bool, str | None]:
    """Rule 1: is a response complete?  Returns ``(completed, why_not)``.

    Complete means HTTP 200, a parseable body, a Responses-API ``status`` absent
    or ``completed``, no ``incomplete_details``, and every chat choice's
    ``finish_reason`` in stop/tool_calls/function_call. Echoed request settings
    such as ``truncation: "disabled"`` are settings, not truncation.
    """
    if status != 200:
        return False, f"http status {status}"
    if not isinstance(response, dict):
        return False, "response body is not a JSON object"
    resp_status = response.get("status")
    if resp_status is not None and resp_status != "completed":
        return False, f"response status {resp_status!r}"
    if response.get("incomplete_details"):
        return False, "incomplete_details present"
    choices = response.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or not choices:
            return False, "no choices"
        for choice in choices:
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if reason not in COMPLETE_FINISH_REASONS:
                return False, f"finish_reason {reason!r}"
    elif response.get("object") != "response" and "output" not in response:
        if "data" in response:  # e.g. /v1/models: complete, but not a generation
            return True, None
        return False, "neither choices nor output in response"
    return True, None


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
    "consumed_incomplete",
    "missing_usage",
    "tool_protocol",
    "bad_tool_arguments",
    "tool_conflict",
    "unknown_tool",
    "reasoning_conflict",
    "no_steps",
    "truncated",
    "responses_chain",
    "unsupported_item",
]

#: Excluded-exchange reasons. The first six are the contract of the issue; the
#: last three cover records a crash or a non-chat route leaves behind.
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
]


def consumption_key(message: dict[str, Any]) -> tuple[str, Any]:
    """Rule 2: what a later request must carry for ``message`` to count as consumed.

    Tool-call answers are identified by their exact ``tool_call_id`` set, text
    answers by their canonical text (string and list-of-parts content compare equal).
    """
    calls = tool_calls(message)
    if calls:
        return ("calls", frozenset(str(c.get("id")) for c in calls))
    return ("text", message_text(message.get("content")))


def carries(key: tuple[str, Any], ids: set[str], texts: set[str]) -> bool:
    kind, value = key
    if kind == "calls":
        return bool(value) and value <= ids
    return value in texts


def is_safe(message: dict[str, Any]) -> bool:
    """Rule 3: plain text, or a call of a terminal tool such as ``finish``."""
    calls = tool_calls(message)
    return not calls or all(call_name(c) in TERMINAL_TOOLS for c in calls)


def bad_tool_arguments(message: dict[str, Any]) -> list[str]:
    """Names of calls whose ``arguments`` are not a JSON object string."""
    bad = []
    for call in tool_calls(message):
        function = call.get("function")
        args = function.get("arguments") if isinstance(function, dict) else None
        try:
            ok = isinstance(args, str) and isinstance(orjson.loads(args), dict)
        except orjson.JSONDecodeError:
            ok = False
        if not ok:
            bad.append(str(call_name(call)))
    return bad


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def apply_reasoning_policy(message: dict[str, Any], drop: bool) -> dict[str, Any]:
    """Rule 9: keep ``reasoning_content`` (or drop it), never with ``<think>`` text in content.

    A leading ``<think>...</think>`` block in string content moves to
    ``reasoning_content`` when the server gave none, and is removed otherwise.
    """
    out = dict(message)
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
    ``reasoning_content``: rule 9 forbids both, and there is no safe way to split them."""
    return bool(message.get("reasoning_content")) and _THINK_OPEN in message_text(
        message.get("content")
    )


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
    """Rule 6: union of tool definitions keyed by function name (type and name for other
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


def extends(prev_request: list[Any], prev_response: dict[str, Any], request: list[Any]) -> bool:
    """Does ``request`` continue the conversation of a step (its request + its response)?"""
    n = len(prev_request)
    if len(request) <= n or request[:n] != prev_request:
        return False
    replay = request[n]
    if not isinstance(replay, dict) or replay.get("role") != "assistant":
        return False
    ids, texts = history_keys([replay])
    return carries(consumption_key(prev_response), ids, texts)


# ---------------------------------------------------------------------------
# Selection (rules 2, 3 and the consumed-incomplete half of rule 5)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    """What selection needs to know of one exchange."""

    index: int
    #: ``completed``/``incomplete`` (rule 1 applied), another outcome, or one of
    #: ``no_outcome``, ``no_request``, ``unsupported_route``.
    status: str
    body: Any = None
    message: dict[str, Any] | None = None
    #: tool-call ids and texts of the assistant messages in this request's history
    history: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


@dataclass(frozen=True)
class Decision:
    index: int
    selected: bool
    reason: str | None = None  # the excluded reason when not selected
    consumed: bool = False
    truncated: bool = False
    duplicate_of: int | None = None


def classify(
    request: dict[str, Any] | None, outcome: dict[str, Any] | None
) -> tuple[str, list[Any] | None, dict[str, Any] | None]:
    """Rule 1 for one exchange, from its raw records: (status, request messages, response).

    ``status`` is the recorded outcome, with ``completed`` kept only for a complete
    response carrying a readable message (else ``incomplete``); ``no_request`` and
    ``no_outcome`` name what a crash left; a completed non-chat request (no
    ``messages`` list) is ``unsupported_route``. The response message is given for
    ``completed`` and ``incomplete`` exchanges only.
    """
    if request is None:
        return "no_request", None, None
    body = request.get("body")
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        messages = None
    if outcome is None:
        return "no_outcome", messages, None
    status = outcome["outcome"]
    if status not in ("completed", "incomplete"):
        return status, messages, None
    if messages is None:
        return "unsupported_route", None, None
    response = outcome.get("response")
    message = response_message(response)
    ok = completeness(outcome.get("status"), response)[0]
    return ("completed" if ok and message is not None else "incomplete"), messages, message


def consumed_flags(
    exchanges: list[tuple[int, dict[str, Any] | None, tuple[AbstractSet[str], AbstractSet[str]]]],
) -> dict[int, bool]:
    """Rule 2: whether a later request carries each response (exact id or canonical text).

    ``exchanges`` in index order: (index, response message or None, the tool-call ids
    and texts of its request's history). Responses-less exchanges get no entry.
    """
    consumed: dict[int, bool] = {}
    ids: set[str] = set()
    texts: set[str] = set()
    for index, message, (history_ids, history_texts) in reversed(exchanges):
        if message is not None:
            consumed[index] = carries(consumption_key(message), ids, texts)
        ids |= history_ids
        texts |= history_texts
    return consumed


def _body_bucket(body: Any) -> Any:
    messages = body.get("messages") if isinstance(body, dict) else None
    return len(messages) if isinstance(messages, list) else -1


def select(views: list[View]) -> tuple[dict[int, Decision], list[tuple[str, str]]]:
    """Decide, for every exchange, step or excluded-with-reason; return problems too.

    ``views`` must be in index order. Every index in gets exactly one decision out.
    """
    decisions: dict[int, Decision] = {}
    problems: list[tuple[str, str]] = []

    consumed = consumed_flags([(v.index, v.message, v.history) for v in views])

    request_indices = [v.index for v in views if v.status not in ("no_request",)]
    last_request = max(request_indices) if request_indices else -1

    groups: dict[Any, list[list[View]]] = {}
    for view in views:
        if view.status == "completed":
            bucket = groups.setdefault(_body_bucket(view.body), [])
            for group in bucket:
                if group[0].body == view.body:
                    group.append(view)
                    break
            else:
                bucket.append([view])
        elif view.status == "incomplete" and consumed.get(view.index):
            decisions[view.index] = Decision(view.index, True, consumed=True, truncated=True)
            problems.append(
                (
                    "consumed_incomplete",
                    f"incomplete response {view.index} was consumed by a later request",
                )
            )
        else:
            decisions[view.index] = Decision(view.index, False, reason=view.status)

    for bucket in groups.values():
        for group in bucket:
            kept = [v for v in group if consumed.get(v.index)]
            if not kept:
                kept = [
                    v
                    for v in group
                    if v.index == last_request or (v.message is not None and is_safe(v.message))
                ]
            keep = kept[-1] if kept else None
            for v in group:
                if keep is not None and v is keep:
                    decisions[v.index] = Decision(
                        v.index, True, consumed=bool(consumed.get(v.index))
                    )
                elif keep is not None:
                    decisions[v.index] = Decision(
                        v.index, False, reason="duplicate_retry", duplicate_of=keep.index
                    )
                else:
                    decisions[v.index] = Decision(v.index, False, reason="unconsumed")
    return decisions, problems


# ---------------------------------------------------------------------------
# Rollout level (rule 7) and the fields a row copies from result.json
# ---------------------------------------------------------------------------

#: result.json fields a results row carries over unchanged.
RESULT_FIELDS = (
    "experiment",
    "status",
    "passed",
    "reward",
    "stop_condition",
    "started",
    "ended",
    "duration_s",
)

_CUT_STOPS = frozenset({"max_iterations", "timeout"})


def rollout_truncation(
    result: dict[str, Any], cut_last_step: int | None
) -> tuple[bool, str | None]:
    """Rule 7: the iteration limit, a timeout, or a cut last step truncate the rollout."""
    stop = result.get("stop_condition")
    if stop in _CUT_STOPS or result.get("status") == "timeout":
        return True, f"rollout stopped by {stop or 'timeout'}"
    if cut_last_step is not None:
        return True, f"last step {cut_last_step} was cut"
    return False, None


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
