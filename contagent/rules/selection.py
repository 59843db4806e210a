"""Which exchanges become steps: per-exchange status (completeness, and the route that makes a
generation), consumption by exact identity, retries vs restarts, consumed incomplete responses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contagent import wire
from contagent.rawlog.records import completeness
from contagent.rules.history import Problem
from contagent.rules.messages import carries, consumption_key, is_safe
from contagent.wire.chat import CallKey, response_message


@dataclass(frozen=True)
class View:
    """What selection needs to know of one exchange."""

    index: int
    #: ``completed``/``incomplete`` (completeness applied), another outcome, or one of
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


def is_chat_route(path: Any) -> bool:
    """The route decides whether an exchange is a generation, not the body's shape: a
    generation is an exchange of an API whose adapter says so (read in chat shape)."""
    return wire.generation_api(path) is not None


def _lenient_messages(request: dict[str, Any]) -> list[Any] | None:
    """The messages of a generation's body orjson refused (lone surrogate escapes, say),
    read with the standard library's parser, which accepts what the proxy accepted, and by
    the body's adapter in chat shape."""
    text = request.get("body_text")
    api = wire.generation_api(request.get("path"))
    if not isinstance(text, str) or api is None:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    return api.request_messages(body) if isinstance(body, dict) else None


def classify(
    request: dict[str, Any] | None, outcome: dict[str, Any] | None
) -> tuple[str, list[Any] | None, dict[str, Any] | None]:
    """Completeness for one exchange, from its raw records: (status, request messages, response).

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
    """Consumption by identity: whether a later request carries each response, and which responses a later
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
    """Completed exchanges grouped by identical request body (retries vs restarts), in first-seen order."""
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
