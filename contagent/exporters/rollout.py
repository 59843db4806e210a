"""Build one rollout's results row from its raw exchange log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contagent import chat, rules
from contagent.errors import ContagentError
from contagent.exporters.summary import TokenUsage
from contagent.layout import RolloutPaths
from contagent.rawlog import RawRollout, read_exchanges, read_result
from contagent.validate.invariants import accounting_problems


@dataclass
class RolloutExport:
    """A row (plain dict, ready for orjson) and what else the export needs of it."""

    row: dict[str, Any]
    raw_bytes: int
    exchanges: int
    #: per branch, the union of its steps' tool definitions
    branch_tools: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


def _views(raw: RawRollout) -> tuple[list[rules.View], dict[int, rules.Scan], list[dict[str, Any]]]:
    """Classify each exchange (rule 1), repair and scan each request (rules 2, 4)."""
    views: list[rules.View] = []
    scans: dict[int, rules.Scan] = {}
    repairs: dict[Any, dict[str, Any]] = {}
    prev: rules.Scan | None = None
    for index in raw.indices:
        status, messages, message = rules.classify(raw.requests.get(index), raw.outcomes.get(index))
        if status == "no_request":
            views.append(rules.View(index, status))
            continue
        history: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        if messages is not None:
            scan = prev = scans[index] = rules.scan_request(messages, prev)
            for rep in scan.repairs:
                repairs.setdefault(rep["tool_call_id"], {**rep, "first_exchange_index": index})
            history = (scan.ids, scan.texts)
        views.append(rules.View(index, status, raw.requests[index].get("body"), message, history))
    return views, scans, list(repairs.values())


def build_row(paths: RolloutPaths, drop_reasoning: bool = False) -> RolloutExport:
    raw = read_exchanges(paths.exchanges)
    result = read_result(paths.result) or {}
    views, scans, repairs = _views(raw)
    decisions, problems = rules.select(views)
    problems = raw.problems + problems
    by_index = {v.index: v for v in views}

    steps: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    tokens = TokenUsage()
    tool_lists: list[Any] = []
    branch_lists: dict[int, list[Any]] = {}
    # open branches: (branch id, last step's exchange index, its request, its response)
    heads: list[tuple[int, int, list[Any], dict[str, Any]]] = []
    protocol_seen: set[str] = set()
    next_branch = 0
    for index in raw.indices:
        decision = decisions.get(index)
        if decision is None:
            continue  # cannot happen with rules.select; the accounting check below fails closed
        view = by_index[index]
        usage = raw.usage(index)
        tokens.billed.add(usage)
        if view.status == "completed" and usage is None:
            problems.append(("missing_usage", f"completed response {index} has no usage"))
        if not decision.selected:
            tokens.excluded.add(usage)
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
        tokens.selected.add(usage)
        request = scans[index].repaired
        assert view.message is not None  # selected steps always have a message
        response = rules.apply_reasoning_policy(view.message, drop_reasoning)
        parent = None
        for pos in range(len(heads) - 1, -1, -1):
            branch, head_index, head_req, head_resp = heads[pos]
            if rules.extends(head_req, head_resp, request):
                parent = head_index
                added = request[len(head_req) :]
                heads.pop(pos)
                break
        else:
            branch, added = next_branch, request
            next_branch += 1
        heads.append((branch, index, request, view.message))
        body = view.body if isinstance(view.body, dict) else {}
        tool_lists.append(body.get("tools"))
        branch_lists.setdefault(branch, []).append(body.get("tools"))
        for problem in scans[index].problems:
            if problem not in protocol_seen:
                protocol_seen.add(problem)
                problems.append(("tool_protocol", f"request {index}: {problem}"))
        if rules.has_think_conflict(response):
            problems.append(
                (
                    "reasoning_conflict",
                    f"response {index}: <think> text in content beside reasoning_content",
                )
            )
        bad = rules.bad_tool_arguments(view.message)
        if bad:
            problems.append(
                (
                    "bad_tool_arguments",
                    f"response {index}: tool call arguments are not JSON ({', '.join(bad)})",
                )
            )
        steps.append(
            {
                "exchange_index": index,
                "branch": branch,
                "extends": parent,
                "messages": added,
                "response": response,
                "finish_reason": chat.finish_reason(raw.outcomes[index].get("response")),
                "consumed": decision.consumed,
                "truncated": decision.truncated,
                "usage": usage,
            }
        )

    tools, conflicts = rules.tool_union(tool_lists)
    problems.extend(
        ("tool_conflict", f"tool {name!r} defined with different schemas") for name in conflicts
    )
    names = {t["function"]["name"] for t in tools if isinstance(t.get("function"), dict)}
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
    truncated, truncation_reason = rules.rollout_truncation(
        result, steps[-1]["exchange_index"] if steps and steps[-1]["truncated"] else None
    )
    if not steps:
        problems.append(("no_steps", "no completed exchange to train on"))
    if truncated:
        problems.append(("truncated", f"truncated: {truncation_reason}"))

    row = {
        "schema_version": 1,
        "rollout_id": result.get("rollout_id") or paths.rollout_id,
        "model": result.get("model") or _model(raw),
        **{name: result.get(name) for name in rules.RESULT_FIELDS},
        "training_ready": not problems,
        "training_ready_reason": "; ".join(text for _, text in problems) if problems else None,
        "not_ready_kinds": sorted({kind for kind, _ in problems}),
        "truncated": truncated,
        "truncation_reason": truncation_reason,
        "steps": steps,
        "excluded": excluded,
        "tools": tools,
        "token_usage": tokens.model_dump(),
        "repairs": [{"kind": "merged_tool_fragments", **r} for r in repairs],
        "branches": next_branch,
        "drop_reasoning": drop_reasoning,
        "raw_log": {"path": str(raw.path.resolve()), "sha256": raw.sha256, "bytes": raw.size},
    }
    own = accounting_problems(row, raw.indices)
    if own:
        raise ContagentError(
            f"{paths.root}: refusing to write an export that loses exchanges: {own[0]}",
            exit_code=3,
        )
    return RolloutExport(
        row=row,
        raw_bytes=raw.size,
        exchanges=len(raw.indices),
        branch_tools={b: rules.tool_union(lists)[0] for b, lists in branch_lists.items()},
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
