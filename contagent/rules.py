"""The selection rules, as pure functions: no IO, no logging, no state.

The exporter uses them to build rows and the validator uses them to check
rows; the proxy uses :func:`completeness` to label outcomes. Keep every rule
here, so that the three can never disagree; :mod:`contagent.chat` only reads
fields out of messages and responses.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from contagent.chat import (
    CallKey,
    call_name,
    legacy_function_call,
    message_text,
    response_message,
    tool_calls,
)
from contagent.history import (
    Problem,
    Scan,
    history_keys,
    merge_tool_fragments,
    message_calls,
    message_problems,
    scan_request,
    tool_protocol_problems,
)

__all__ = [
    "Problem",
    "Scan",
    "history_keys",
    "merge_tool_fragments",
    "scan_request",
    "tool_protocol_problems",
]

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
    "torn_line",
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
    """Rule 2: what a later request must carry for ``message`` to count as consumed.

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
    """Rule 3: plain text, or a call of a terminal tool such as ``finish``."""
    if legacy_function_call(message) is not None:
        return False
    calls = tool_calls(message)
    return not calls or all(call_name(c) in TERMINAL_TOOLS for c in calls)


def response_problems(message: dict[str, Any], index: int) -> list[Problem]:
    """What makes a response unfit for a training row (rule 5)."""
    return message_problems(message, f"response {index}")


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def apply_reasoning_policy(message: dict[str, Any], drop: bool) -> dict[str, Any]:
    """Rule 9: keep reasoning as ``reasoning_content`` (or drop it), never with ``<think>`` text.

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
    reasoning, or two different reasoning texts under both names: rule 9 forbids both."""
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
    if len(request) <= n:
        return False
    replay = request[n]
    if not isinstance(replay, dict) or replay.get("role") != "assistant":
        return False
    calls, texts = history_keys([replay])
    if not carries(consumption_key(prev_response), calls, texts):
        return False
    return request[:n] == prev_request


# ---------------------------------------------------------------------------
# Selection (rules 2, 3 and the consumed-incomplete half of rule 5)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    """What selection needs to know of one exchange."""

    index: int
    #: ``completed``/``incomplete`` (rule 1 applied), another outcome, or one of
    #: ``no_outcome``, ``no_request``, ``unsupported_route``, ``unreadable_request``.
    status: str
    body: Any = None
    message: dict[str, Any] | None = None
    #: call identities and texts of the assistant messages in this request's history
    history: tuple[frozenset[CallKey], frozenset[str]] = (frozenset(), frozenset())


@dataclass(frozen=True)
class Decision:
    index: int
    selected: bool
    reason: str | None = None  # the excluded reason when not selected
    consumed: bool = False
    truncated: bool = False
    duplicate_of: int | None = None


#: Routes whose exchanges are generations: chat completions, and the Responses API (read in
#: chat shape, see :mod:`contagent.responses`).
GENERATION_ROUTES = ("/chat/completions", "/responses")


def is_chat_route(path: Any) -> bool:
    """Rule 8: the route decides whether an exchange is a generation, not the body's shape."""
    return isinstance(path, str) and path.partition("?")[0].rstrip("/").endswith(GENERATION_ROUTES)


def _lenient_messages(request: dict[str, Any]) -> list[Any] | None:
    """The messages of a chat body orjson refused (lone surrogate escapes, say), read with
    the standard library's parser, which accepts what the proxy accepted."""
    text = request.get("body_text")
    if not isinstance(text, str):
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    messages = body.get("messages") if isinstance(body, dict) else None
    return messages if isinstance(messages, list) else None


def classify(
    request: dict[str, Any] | None, outcome: dict[str, Any] | None
) -> tuple[str, list[Any] | None, dict[str, Any] | None]:
    """Rule 1 for one exchange, from its raw records: (status, request messages, response).

    ``status`` is the recorded outcome, with ``completed`` kept only for a complete
    response carrying a readable message (else ``incomplete``); ``no_request`` and
    ``no_outcome`` name what a crash left. A completed or cut exchange on a route other
    than chat completions is ``unsupported_route``; on the chat route, a body without a
    readable ``messages`` list is ``unreadable_request`` (its messages, when a lenient
    parser reads them, still count as consumption evidence). The response message is
    given for ``completed`` and ``incomplete`` exchanges only.
    """
    if request is None:
        return "no_request", None, None
    body = request.get("body")
    messages = body.get("messages") if isinstance(body, dict) else None
    readable = isinstance(messages, list)
    if not readable:
        messages = _lenient_messages(request) if is_chat_route(request.get("path")) else None
    if outcome is None:
        return "no_outcome", messages, None
    status = outcome["outcome"]
    if status not in ("completed", "incomplete"):
        return status, messages, None
    if not is_chat_route(request.get("path")):
        return "unsupported_route", None, None
    if not readable:
        return "unreadable_request", messages, None
    response = outcome.get("response")
    message = response_message(response)
    ok = completeness(outcome.get("status"), response)[0]
    return ("completed" if ok and message is not None else "incomplete"), messages, message


def consumption(views: list[View]) -> tuple[dict[int, bool], dict[int, list[str]]]:
    """Rule 2: whether a later request carries each response, and which responses a later
    request carries only in part (their calls not replayed, by id).

    ``views`` in index order; response-less exchanges get no entry.
    """
    consumed: dict[int, bool] = {}
    partial: dict[int, list[str]] = {}
    calls: set[CallKey] = set()
    texts: set[str] = set()
    for view in reversed(views):
        if view.message is not None:
            key = consumption_key(view.message)
            consumed[view.index] = carries(key, calls, texts)
            if key[0] == "calls" and not consumed[view.index] and key[1] & calls:
                partial[view.index] = sorted(k[0] for k in key[1] - calls)
        calls |= view.history[0]
        texts |= view.history[1]
    return consumed, partial


def _body_bucket(body: Any) -> Any:
    messages = body.get("messages") if isinstance(body, dict) else None
    return len(messages) if isinstance(messages, list) else -1


def _groups(views: list[View]) -> list[list[View]]:
    """Completed exchanges grouped by identical request body (rule 3), in first-seen order."""
    buckets: dict[Any, list[list[View]]] = {}
    groups: list[list[View]] = []
    for view in views:
        if view.status != "completed":
            continue
        bucket = buckets.setdefault(_body_bucket(view.body), [])
        for group in bucket:
            if group[0].body == view.body:
                group.append(view)
                break
        else:
            bucket.append([view])
            groups.append(bucket[-1])
    return groups


def _ambiguous(views: list[View], consumed: dict[int, bool]) -> list[Problem]:
    """Identity rule: a call (or answer) carried by two consumed responses cannot be
    attributed to either, so neither "the later copy wins" nor both are safe to train on."""
    owners: dict[tuple[str, Any], list[int]] = {}
    for view in views:
        if view.message is not None and consumed.get(view.index):
            kind, value = consumption_key(view.message)
            for item in value if kind == "calls" else (value,):
                owners.setdefault((kind, item), []).append(view.index)
    seen: set[tuple[int, ...]] = set()
    problems: list[Problem] = []
    for (kind, item), found in owners.items():
        if len(found) > 1 and tuple(found) not in seen:
            seen.add(tuple(found))
            what = f"tool call {item[0]!r} ({item[1]})" if kind == "calls" else "answer"
            problems.append(
                (
                    "ambiguous_call_id",
                    f"responses {', '.join(map(str, found))} carry the same {what}; "
                    "which one the agent used cannot be decided",
                )
            )
    return problems


def select(views: list[View]) -> tuple[dict[int, Decision], list[Problem]]:
    """Decide, for every exchange, step or excluded-with-reason; return problems too.

    ``views`` must be in index order. Every index in gets exactly one decision out.
    A consumed copy of a request is never dropped: when several copies were used
    (a harness restart, best-of-n) each is kept, and the branches tell them apart.
    """
    decisions: dict[int, Decision] = {}
    consumed, partial = consumption(views)
    problems = _ambiguous(views, consumed)
    for index, missing in partial.items():
        problems.append(
            (
                "partial_execution",
                f"response {index}: only part of its tool calls was executed "
                f"({', '.join(missing)} never replayed)",
            )
        )
    request_indices = [v.index for v in views if v.status != "no_request"]
    last_request = max(request_indices) if request_indices else -1

    for view in views:
        used = consumed.get(view.index) or view.index in partial
        if view.status == "incomplete" and used:
            decisions[view.index] = Decision(
                view.index, True, consumed=bool(consumed.get(view.index)), truncated=True
            )
            problems.append(
                (
                    "consumed_incomplete",
                    f"incomplete response {view.index} was consumed by a later request",
                )
            )
        elif view.status != "completed":
            decisions[view.index] = Decision(view.index, False, reason=view.status)

    for group in _groups(views):
        kept = [v for v in group if consumed.get(v.index) or v.index in partial]
        if not kept:
            kept = [
                v
                for v in group
                if v.index == last_request or (v.message is not None and is_safe(v.message))
            ][-1:]
        keep = {v.index for v in kept}
        for v in group:
            if v.index in keep:
                decisions[v.index] = Decision(v.index, True, consumed=bool(consumed.get(v.index)))
            elif kept:
                decisions[v.index] = Decision(
                    v.index, False, reason="duplicate_retry", duplicate_of=kept[-1].index
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
    result: dict[str, Any], cut_last_step: int | None, cut_final: int | None = None
) -> tuple[bool, str | None]:
    """Rule 7: the iteration limit, a timeout, a cut last step, or a final generation that
    was cut with nothing after it (even though that exchange itself is excluded)."""
    stop = result.get("stop_condition")
    if stop in _CUT_STOPS or result.get("status") == "timeout":
        return True, f"rollout stopped by {stop or 'timeout'}"
    if cut_last_step is not None:
        return True, f"last step {cut_last_step} was cut"
    if cut_final is not None:
        return True, f"final generation {cut_final} was cut"
    return False, None


def final_cut(statuses: dict[int, str]) -> int | None:
    """The last exchange that produced a generation, when that generation was cut."""
    generations = [i for i, s in statuses.items() if s in ("completed", "incomplete")]
    last = max(generations, default=None)
    return last if last is not None and statuses[last] == "incomplete" else None


def selected_for_training(row: dict[str, Any], filter: str) -> bool:
    """The one rule for which rows become training records (Parquet): training-ready, and
    passed unless ``filter`` is ``all``. Exporter and validator both call it."""
    if row.get("training_ready") is not True:
        return False
    return filter == "all" or row.get("passed") is True


def accounting_problems(row: dict[str, Any], raw_indices: list[int]) -> list[str]:
    """Rule 5: every raw exchange index appears exactly once, in steps or in excluded."""
    seen = Counter(s["exchange_index"] for s in row["steps"])
    seen.update(e["exchange_index"] for e in row["excluded"])
    problems = [f"exchange {i} appears {n} times" for i, n in sorted(seen.items()) if n > 1]
    raw = set(raw_indices)
    missing = sorted(raw - seen.keys())
    extra = sorted(seen.keys() - raw)
    if missing:
        problems.append(f"exchanges missing from the row: {missing[:10]}")
    if extra:
        problems.append(f"row names exchanges the raw log lacks: {extra[:10]}")
    return problems
