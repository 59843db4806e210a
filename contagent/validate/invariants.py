"""Invariants a results row must satisfy against its raw log (pure functions, no IO).

These check the *output*; they do not re-run the exporter. Each returns a
list of human-readable violations, empty when the row is sound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contagent import rules
from contagent.core.rows import RESULT_FIELDS
from contagent.core.trajectory import request_messages
from contagent.rawlog.read import RawRollout
from contagent.rules import accounting_problems
from contagent.wire import chat

_NO_KEYS: tuple[frozenset[Any], frozenset[str]] = (frozenset(), frozenset())


def token_problems(row: dict[str, Any], raw: RawRollout) -> list[str]:
    """The token identity: selected + excluded == billed per field, each equal to the raw sums."""
    problems = []
    usage = row["token_usage"]
    by_index = {i: raw.usage(i) for i in raw.indices}
    expect = {"billed": chat.sum_usage(by_index.values())}
    expect["selected"] = chat.sum_usage(by_index.get(s["exchange_index"]) for s in row["steps"])
    expect["excluded"] = chat.sum_usage(by_index.get(e["exchange_index"]) for e in row["excluded"])
    for part, counts in expect.items():
        if usage[part] != counts:
            problems.append(f"token_usage.{part} is {usage[part]}, the raw log says {counts}")
    for field in chat.USAGE_FIELDS:
        if usage["selected"][field] + usage["excluded"][field] != usage["billed"][field]:
            problems.append(f"selected + excluded != billed for {field}")
    for entry in [*row["steps"], *row["excluded"]]:
        if entry.get("usage") != by_index.get(entry["exchange_index"]):
            problems.append(f"exchange {entry['exchange_index']}: usage differs from the raw log")
    return problems


def result_problems(
    row: dict[str, Any], result: dict[str, Any], statuses: dict[int, str]
) -> list[str]:
    """The row says what result.json says, and is truncated exactly when the truncation rule says so."""
    problems = [
        f"{name} is {row.get(name)!r}, result.json says {result.get(name)!r}"
        for name in RESULT_FIELDS
        if row.get(name) != result.get(name)
    ]
    steps = row["steps"]
    cut = steps[-1]["exchange_index"] if steps and steps[-1]["truncated"] else None
    truncated, _ = rules.rollout_truncation(result, cut, rules.final_cut(statuses))
    if row["truncated"] != truncated:
        problems.append(f"truncated is {row['truncated']}, the truncation rule says {truncated}")
    return problems


@dataclass(frozen=True)
class _Facts:
    """What the raw log says of a row's exchanges, as the row's checks read it."""

    raw: RawRollout
    #: classify() of each exchange: (status, request messages, response message)
    info: dict[int, tuple[str, list[Any] | None, dict[str, Any] | None]]
    consumed: dict[int, bool]
    partial: dict[int, list[str]]
    last_request: int

    @classmethod
    def read(cls, raw: RawRollout) -> _Facts:
        info = {i: rules.classify(raw.requests.get(i), raw.outcomes.get(i)) for i in raw.indices}
        views = []
        for i, (status, messages, message) in info.items():
            keys = rules.history_keys(messages) if messages is not None else _NO_KEYS
            views.append(
                rules.View(
                    i, status, _body(raw, i), message, (frozenset(keys[0]), frozenset(keys[1]))
                )
            )
        consumed, partial = rules.consumption(views)
        last_request = max(raw.requests) if raw.requests else -1
        return cls(raw, info, consumed, partial, last_request)

    def must_keep(self, i: int, message: dict[str, Any]) -> bool:
        """A response no export may drop: consumed in full or in part, a safe ending, or the
        answer to the last request."""
        return (
            bool(self.consumed.get(i))
            or i in self.partial
            or rules.is_safe(message)
            or i == self.last_request
        )


def row_problems(row: dict[str, Any], raw: RawRollout, result: dict[str, Any]) -> list[str]:
    """Every rule of the export, checked on ``row`` against ``raw`` and ``result``."""
    facts = _Facts.read(raw)
    problems = accounting_problems(row, raw.indices) + token_problems(row, raw)
    problems += result_problems(row, result, {i: v[0] for i, v in facts.info.items()})
    problems += _exclusion_problems(row, facts)
    try:
        full = request_messages(row["steps"])
    except KeyError as exc:
        return [*problems, f"a step extends {exc.args[0]}, which is not an earlier step"]
    not_ready_causes: list[str] = [text for _, text in raw.problems]
    problems += _step_problems(row, facts, full, not_ready_causes)
    problems.extend(_tool_problems(row, raw, not_ready_causes))
    for i, (status, _, _) in facts.info.items():
        if status == "completed" and raw.usage(i) is None:
            not_ready_causes.append(f"completed exchange {i} has no usage")
        if status == "unreadable_request":
            not_ready_causes.append(f"chat request {i} cannot be read")
    return problems + _readiness_problems(row, not_ready_causes)


def _exclusion_problems(row: dict[str, Any], facts: _Facts) -> list[str]:
    """Each excluded exchange is excluded for what the raw log says of it."""
    problems = []
    for exc in row["excluded"]:
        i, reason = exc["exchange_index"], exc["reason"]
        status = facts.info.get(i, ("?",))[0]
        if reason == "duplicate_retry":
            keep = exc.get("duplicate_of")
            if status != "completed" or keep is None or not _same_body(facts.raw, i, keep):
                problems.append(f"exchange {i}: duplicate_retry of {keep} is not a retry of it")
            elif keep not in {s["exchange_index"] for s in row["steps"]}:
                problems.append(f"exchange {i}: duplicate_of {keep} is not a step")
        elif reason == "unconsumed":
            message = facts.info[i][2] if i in facts.info else None
            if status != "completed" or message is None:
                problems.append(f"exchange {i}: unconsumed but not completed")
            elif facts.must_keep(i, message):
                problems.append(f"exchange {i}: dropped as unconsumed but it must be kept")
        elif reason != status:
            problems.append(f"exchange {i}: excluded as {reason} but the raw log says {status}")
        if status == "incomplete" and facts.consumed.get(i):
            problems.append(f"exchange {i}: incomplete response consumed yet excluded")
    return problems


def _step_problems(
    row: dict[str, Any], facts: _Facts, full: dict[int, Any], causes: list[str]
) -> list[str]:
    """Each step is its raw exchange, kept as the rules say; what makes the row not
    training-ready is added to ``causes``."""
    problems: list[str] = []
    bodies_seen: list[tuple[int, Any]] = []
    for step in row["steps"]:
        i = step["exchange_index"]
        status, messages, message = facts.info.get(i, ("?", None, None))
        where = f"step {i}"
        if status not in ("completed", "incomplete") or message is None or messages is None:
            problems.append(f"{where}: raw exchange is {status}, not a response")
            continue
        problems += _kept_as_recorded(
            step, status, messages, message, row["drop_reasoning"], full, causes
        )
        carried = facts.consumed.get(i, False)
        if step["consumed"] != carried:
            problems.append(f"{where}: consumed flag is {step['consumed']}, should be {carried}")
        if not facts.must_keep(i, message):
            problems.append(f"{where}: an unconsumed tool call the agent moved past was kept")
        if step["extends"] is not None:
            parent = step["extends"]
            parent_msg = facts.info.get(parent, (None, None, None))[2]
            if parent_msg is None or not rules.extends(full[parent], parent_msg, full[i]):
                problems.append(f"{where}: does not extend step {parent}")
        body = facts.raw.requests[i].get("body")
        for j, other in bodies_seen:
            if other == body and not (carried and facts.consumed.get(j)):
                problems.append(f"{where}: same request as step {j}; a retry was kept twice")
        bodies_seen.append((i, body))
        causes.extend(f"{where}: {t}" for _, t in rules.tool_protocol_problems(full[i]))
        causes.extend(t for _, t in rules.response_problems(message, i))
        if i in facts.partial:
            causes.append(f"{where}: executed in part")
    return problems


def _kept_as_recorded(
    step: dict[str, Any],
    status: str,
    messages: list[Any],
    message: dict[str, Any],
    drop: bool,
    full: dict[int, Any],
    causes: list[str],
) -> list[str]:
    """A step's messages and response are the raw exchange's, truncated exactly when it was
    cut, its reasoning kept or dropped as the row says."""
    i = step["exchange_index"]
    where = f"step {i}"
    problems = []
    if status == "incomplete":
        causes.append(f"{where}: incomplete response kept")
        if not step["truncated"]:
            problems.append(f"{where}: cut response not marked truncated")
    elif step["truncated"]:
        problems.append(f"{where}: marked truncated but its response is complete")
    if full[i] != rules.merge_tool_fragments(messages)[0]:
        problems.append(f"{where}: messages differ from the raw request")
    if step["response"] != rules.apply_reasoning_policy(message, drop):
        problems.append(f"{where}: response differs from the raw response")
    if drop and "reasoning_content" in step["response"]:
        problems.append(f"{where}: reasoning kept against the reasoning rule")
    if rules.has_think_conflict(message):
        causes.append(f"{where}: <think> text in content beside reasoning_content")
    return problems


def _readiness_problems(row: dict[str, Any], causes: list[str]) -> list[str]:
    """A training-ready row has steps, is whole and has no cause against it; any other row
    says why it is not."""
    problems = []
    if row["training_ready"]:
        if not row["steps"]:
            problems.append("training-ready row without steps")
        if row["truncated"]:
            problems.append("training-ready row is truncated")
        problems.extend(f"training-ready, yet {cause}" for cause in dict.fromkeys(causes))
    elif not row.get("training_ready_reason") or not row["not_ready_kinds"]:
        problems.append("not training-ready, with no reason given")
    if row["training_ready"] and row["not_ready_kinds"]:
        problems.append("training-ready, yet not_ready_kinds are given")
    return problems


def _tool_problems(row: dict[str, Any], raw: RawRollout, causes: list[str]) -> list[str]:
    lists = [_body(raw, s["exchange_index"]).get("tools") for s in row["steps"]]
    union, conflicts = rules.tool_union(lists)
    causes.extend(f"tool {c!r} has conflicting schemas" for c in conflicts)
    problems = [] if row["tools"] == union else ["tools are not the union of the steps' tools"]
    names = rules.callable_names(row["tools"])
    for step in row["steps"]:
        for call in chat.tool_calls(step["response"]):
            if chat.call_name(call) not in names:
                causes.append(
                    f"step {step['exchange_index']} calls unknown tool {chat.call_name(call)!r}"
                )
    return problems


def _body(raw: RawRollout, index: int) -> dict[str, Any]:
    body = raw.requests.get(index, {}).get("body")
    return body if isinstance(body, dict) else {}


def _same_body(raw: RawRollout, a: int, b: int) -> bool:
    return a in raw.requests and b in raw.requests and _body(raw, a) == _body(raw, b)
