"""A results row derived from a rollout's raw exchange log.

:func:`derive_row` is pure (no IO); :func:`build_row` reads a rollout's files and
calls it. The exporter writes what they return, the viewer shows it for a run in
progress, and the validator derives it again from the raw log and compares every
field, so none of them can disagree on a rule; the validator's own invariants
(:mod:`contagent.validate.invariants`) check the derivation independently.

The row is built as a plain dict by :func:`contagent.core.rows.result_row`, in
:class:`~contagent.core.rows.ResultRow`'s field order (the fast path for orjson).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contagent import rules
from contagent.core.rows import FROM_RESULT, RESULT_FIELDS, result_row
from contagent.core.trajectory import branch_ids
from contagent.errors import ContagentError
from contagent.export.formats.rollout_data import RolloutData
from contagent.layout import RolloutPaths
from contagent.rawlog.read import MAX_RAW_LOG_BYTES, RawRollout, read_exchanges
from contagent.rawlog.result import read_result as read_result_file
from contagent.rawlog.reward import read_reward
from contagent.rules import token_samples as token_rules
from contagent.rules.groups import ATTEMPT_FIELDS
from contagent.wire import chat

#: The ``result.json`` fields the export reads, type-checked as it reads them.
RESULT_READ: tuple[str, ...] = (*FROM_RESULT, "reference_solution")


def read_result(path: Path) -> dict[str, Any] | None:
    """A rollout's ``result.json`` as the export reads it (:data:`RESULT_READ` checked), or
    None when there is none."""
    return read_result_file(path, RESULT_READ)


def read_verdict(paths: RolloutPaths) -> dict[str, Any]:
    """What the export knows of a rollout's outcome: its ``result.json``, and the reward a
    harness gave a rollout the proxy recorded alone (``reward.json``: its reward and
    ``passed`` where ``result.json`` states none, and the ``group`` it was posted with)."""
    result = read_result(paths.result) or {}
    posted = read_reward(paths.root)
    if posted is None:
        return result
    verdict = dict(result)
    for name in ("reward", "passed"):
        if verdict.get(name) is None:
            verdict[name] = getattr(posted, name)
    verdict["group"] = posted.group
    return verdict


@dataclass
class Derived:
    """A row (plain dict, ready for orjson), per branch the union of its tool definitions,
    and the token samples (None when the raw log holds no token data)."""

    row: dict[str, Any]
    branch_tools: dict[int, list[dict[str, Any]]]
    tokens: token_rules.TokenSamples | None = None


def _views(raw: RawRollout) -> tuple[list[rules.View], dict[int, rules.Scan], list[dict[str, Any]]]:
    """Classify each exchange by completeness; repair fragments and scan each request's
    history for what it carries (consumption by identity)."""
    views: list[rules.View] = []
    scans: dict[int, rules.Scan] = {}
    repairs: dict[Any, dict[str, Any]] = {}
    prev: rules.Scan | None = None
    for index in raw.indices:
        status, messages, message = rules.classify(raw.requests.get(index), raw.outcomes.get(index))
        if status == "no_request":
            views.append(rules.View(index, status))
            continue
        history: tuple[frozenset[Any], frozenset[str]] = (frozenset(), frozenset())
        if messages is not None:
            scan = rules.scan_request(messages, prev)
            history = (scan.calls, scan.texts)
            if status != "unreadable_request":
                prev = scans[index] = scan
                for rep in scan.repairs:
                    repairs.setdefault(rep["tool_call_id"], {**rep, "first_exchange_index": index})
        views.append(rules.View(index, status, raw.requests[index].get("body"), message, history))
    return views, scans, list(repairs.values())


def _parents(
    selected: list[tuple[int, list[Any], dict[str, Any]]],
) -> dict[int, int | None]:
    """Branches: each step extends the longest earlier step whose conversation it continues."""
    parents: dict[int, int | None] = {}
    # earlier steps sorted by (request length, index): the longest, then latest, first
    earlier: list[tuple[int, int]] = []
    by_index = {index: (request, message) for index, request, message in selected}
    for index, request, _ in selected:
        parent = None
        for n, candidate in reversed(earlier):
            if n >= len(request):
                continue
            prev_request, prev_message = by_index[candidate]
            if rules.extends(prev_request, prev_message, request):
                parent = candidate
                break
        parents[index] = parent
        bisect.insort(earlier, (len(request), index))
    return parents


@dataclass
class _Selection:
    """What the selection rules made of a raw log: the views, scans and repairs of its
    exchanges, each one's decision, and the problems found on the way, in order."""

    views: dict[int, rules.View]
    scans: dict[int, rules.Scan]
    repairs: list[dict[str, Any]]
    decisions: dict[int, rules.Decision]
    problems: list[rules.Problem]
    usages: dict[int, dict[str, int] | None]


def _select(raw: RawRollout) -> _Selection:
    views, scans, repairs = _views(raw)
    decisions, problems = rules.select(views)
    problems = raw.problems + problems
    problems.extend(
        ("unreadable_request", f"request {v.index}: a chat request whose body cannot be read")
        for v in views
        if v.status == "unreadable_request"
    )
    usages = {i: raw.usage(i) for i in raw.indices}
    return _Selection({v.index: v for v in views}, scans, repairs, decisions, problems, usages)


def _steps(
    raw: RawRollout, sel: _Selection, drop_reasoning: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The row's steps and excluded exchanges, and its number of branches; each selected
    step's problems are added to ``sel.problems``."""
    by_index, scans, problems = sel.views, sel.scans, sel.problems
    chosen = [i for i in raw.indices if i in sel.decisions and sel.decisions[i].selected]
    for index in chosen:
        if by_index[index].message is None:
            raise AssertionError(f"selected exchange {index} has no response")
    parents = _parents(
        [(i, scans[i].repaired, by_index[i].message) for i in chosen]  # type: ignore[misc]
    )
    branch, branch_count = branch_ids([(i, parents[i]) for i in chosen])
    seen: set[rules.Problem] = set()
    steps: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for index in raw.indices:
        decision, view, usage = sel.decisions.get(index), by_index[index], sel.usages[index]
        if decision is None:
            continue  # cannot happen with rules.select; the exporter's accounting check fails closed
        if view.status == "completed" and usage is None:
            problems.append(
                (
                    "missing_usage",
                    f"completed response {index} has no usage (or only implausible counts)",
                )
            )
        if not decision.selected:
            excluded.append(
                {
                    "exchange_index": index,
                    "reason": decision.reason,
                    "duplicate_of": decision.duplicate_of,
                    "detail": _detail(raw, index),
                    "usage": usage,
                }
            )
            continue
        assert view.message is not None
        scan = scans[index]
        for problem in scan.all_problems:
            if problem not in seen:
                seen.add(problem)
                kind, text = problem
                problems.append((kind, f"request {index}: {text}"))
        problems.extend(rules.response_problems(view.message, index))
        if rules.has_think_conflict(view.message):
            problems.append(
                ("reasoning_conflict", f"response {index}: <think> text or two reasonings")
            )
        parent = parents[index]
        steps.append(
            {
                "exchange_index": index,
                "branch": branch[index],
                "extends": parent,
                "messages": scan.repaired[len(scans[parent].repaired) :]
                if parent is not None
                else scan.repaired,
                "response": rules.apply_reasoning_policy(view.message, drop_reasoning),
                "finish_reason": chat.finish_reason(raw.outcomes[index].get("response")),
                "consumed": decision.consumed,
                "truncated": decision.truncated,
                "usage": usage,
            }
        )
    return steps, excluded, branch_count


def _tools(
    steps: list[dict[str, Any]], ordered: list[Any], problems: list[rules.Problem]
) -> list[dict[str, Any]]:
    """The union of the steps' tool definitions; a conflict or a call to a tool not among
    them is added to ``problems``."""
    tools, conflicts = rules.tool_union(
        [b.get("tools") if isinstance(b, dict) else None for b in ordered]
    )
    problems.extend(
        ("tool_conflict", f"tool {name!r} defined with different schemas") for name in conflicts
    )
    names = rules.callable_names(tools)
    for step in steps:
        for call in chat.tool_calls(step["response"]):
            if chat.call_name(call) not in names:
                problems.append(
                    (
                        "unknown_tool",
                        f"response {step['exchange_index']} calls {chat.call_name(call)!r}, "
                        "which is not among the request tools",
                    )
                )
    return tools


def _truncation(
    result: dict[str, Any], sel: _Selection, steps: list[dict[str, Any]]
) -> tuple[bool, str | None]:
    """The rollout's truncation; it and the rollout-level rules add their problems."""
    truncated, truncation_reason = rules.rollout_truncation(
        result,
        steps[-1]["exchange_index"] if steps and steps[-1]["truncated"] else None,
        rules.final_cut({v.index: v.status for v in sel.views.values()}),
    )
    if result.get("reference_solution") is True:
        sel.problems.append(("oracle", "the oracle ran the task's solution: no model made it"))
    if not steps:
        sel.problems.append(("no_steps", "no completed exchange to train on"))
    if truncated:
        sel.problems.append(("truncated", f"truncated: {truncation_reason}"))
    return truncated, truncation_reason


def derive_row(
    raw: RawRollout, result: dict[str, Any], rollout_id: str, drop_reasoning: bool
) -> Derived:
    """The results row of one rollout: every field follows from ``raw`` and ``result``."""
    sel = _select(raw)
    steps, excluded, branch_count = _steps(raw, sel, drop_reasoning)
    ordered = [sel.views[s["exchange_index"]].body for s in steps]
    tools = _tools(steps, ordered, sel.problems)
    truncated, truncation_reason = _truncation(result, sel, steps)
    problems, usages = sel.problems, sel.usages
    tokens = (
        token_rules.plan(steps, branch_count, raw.requests, raw.outcomes, usages)
        if token_rules.has_token_data(raw.outcomes)
        else None
    )
    row = result_row(
        rollout_id=result.get("rollout_id") or rollout_id,
        model=result.get("model") or _model(raw),
        **{name: result.get(name) for name in RESULT_FIELDS},
        training_ready=not problems,
        training_ready_reason="; ".join(text for _, text in problems) if problems else None,
        not_ready_kinds=sorted({kind for kind, _ in problems}),
        truncated=truncated,
        truncation_reason=truncation_reason,
        steps=steps,
        excluded=excluded,
        tools=tools,
        token_usage={
            "billed": chat.sum_usage(usages.values()),
            "selected": chat.sum_usage(usages[s["exchange_index"]] for s in steps),
            "excluded": chat.sum_usage(usages[e["exchange_index"]] for e in excluded),
        },
        repairs=[{"kind": "merged_tool_fragments", **r} for r in sel.repairs],
        branches=branch_count,
        drop_reasoning=drop_reasoning,
        tokens=tokens.section() if tokens is not None else None,
        raw_log={"path": str(raw.path.resolve()), "sha256": raw.sha256, "bytes": raw.size},
    )
    return Derived(
        row,
        rules.branch_tools(zip((s["branch"] for s in steps), ordered, strict=True)),
        tokens,
    )


def _detail(raw: RawRollout, index: int) -> str | None:
    out = raw.outcomes.get(index)
    if out is None:
        return None
    error = out.get("error")
    if error:
        return str(error)[:500]
    if out.get("outcome") in ("completed", "incomplete"):
        return rules.completeness(out.get("status"), out.get("response"))[1]
    return None


def _model(raw: RawRollout) -> str | None:
    for req in raw.requests.values():
        body = req.get("body")
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            return body["model"]
    return None


@dataclass
class RolloutExport:
    """A row (plain dict, ready for orjson) and what else the export needs of it."""

    row: dict[str, Any]
    raw_bytes: int
    exchanges: int
    #: what the formats need besides the row: tool unions, token samples
    data: RolloutData = field(default_factory=RolloutData)


def build_row(
    paths: RolloutPaths, drop_reasoning: bool = False, max_raw_log: int = MAX_RAW_LOG_BYTES
) -> RolloutExport:
    """Read one rollout's raw log (in either form, at most ``max_raw_log`` plain bytes) and
    result.json and derive its row; refuse (exit 3) a row that would lose an exchange
    (fail closed)."""
    raw = read_exchanges(paths.raw_log, max_raw_log)
    result = read_verdict(paths)
    derived = derive_row(raw, result, paths.rollout_id, drop_reasoning)
    own = rules.accounting_problems(derived.row, raw.indices)
    if own:
        raise ContagentError(
            f"{paths.root}: refusing to write an export that loses exchanges: {own[0]}",
            exit_code=3,
        )
    return RolloutExport(
        row=derived.row,
        raw_bytes=raw.size,
        exchanges=len(raw.indices),
        data=rollout_data(raw, result, derived.row["steps"], derived.branch_tools, derived.tokens),
    )


def rollout_data(
    raw: RawRollout,
    result: dict[str, Any],
    steps: list[dict[str, Any]],
    branch_tools: dict[int, list[dict[str, Any]]],
    tokens: token_rules.TokenSamples | None,
) -> RolloutData:
    """What the formats take from the raw log and ``result.json`` besides a row's fields
    (the exporter and the validator both build it here)."""
    cached = {}
    for step in steps:
        value = raw.cached_tokens(step["exchange_index"])
        if value is not None:
            cached[step["exchange_index"]] = value
    agent, version = result.get("agent"), result.get("agent_version")
    return RolloutData(
        branch_tools,
        rules.trainer_tools(
            (
                (s["branch"], s["exchange_index"], raw.requests.get(s["exchange_index"]))
                for s in steps
            ),
            result.get("server"),
        ),
        tokens,
        cached,
        agent if isinstance(agent, str) else None,
        version if isinstance(version, str) else None,
        {k: result.get(k) for k in ATTEMPT_FIELDS},
    )
