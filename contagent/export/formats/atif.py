"""ATIF: Harbor's Agent Trajectory Interchange Format, one JSON document per rollout.

Each selected rollout becomes ``OUT/atif/<rollout_id>.json``, an ATIF trajectory
(``schema_version`` :data:`ATIF_VERSION`) that Harbor's ``Trajectory`` model reads.
The branch that holds the rollout's last step is the trajectory itself; every other
branch (a critic, a summariser, a restarted attempt) is embedded in
``subagent_trajectories``, as ATIF embeds delegated work, with the steps it shares
with the branch it forks from marked ``is_copied_context``.

Conversation messages map to steps by role: ``system`` and ``developer`` to a
``system`` step, ``user`` to a ``user`` step, ``assistant`` to an ``agent`` step
(content, ``reasoning_content``, tool calls with object ``arguments``), and each
``tool`` message to an ``observation`` result of the agent step before it. An agent
step that is a model response of this rollout has ``llm_call_count`` 1 and
``metrics`` (usage, cached tokens, and the server's token ids and logprobs when the
raw log holds them); an assistant message that only came in a request (few-shot
examples, another branch's turns) is copied context without metrics.

ATIF has no reward field; the root's ``extra`` carries the reward, the verdict and
the rollout's names. The folder's index (:mod:`contagent.export.formats.documents`) accounts
for every row: those written, and those left out with why.
"""

from __future__ import annotations

from typing import Any

from contagent.core.trajectory import Turn, branch_turns
from contagent.errors import ContagentError
from contagent.export.formats.rollout_data import RolloutData
from contagent.export.formats.trl import object_arguments
from contagent.rules import selected_for_training
from contagent.rules.token_samples import StepTokens

#: The ATIF version the documents declare (the newest Harbor 0.26 reads).
ATIF_VERSION = "ATIF-v1.8"

#: The ATIF step source of each conversation role (a tool message is an observation).
_SOURCES = {"system": "system", "developer": "system", "user": "user", "assistant": "agent"}

UNKNOWN = "unknown"
"""The agent's name and version when ``result.json`` does not give them (ATIF requires both)."""


def left_out_reason(row: dict[str, Any], filter: str) -> str | None:
    """Why ``--filter`` keeps ``row`` out of the folder, or None when it is selected."""
    if selected_for_training(row, filter):
        return None
    if not row["training_ready"]:
        return f"not training-ready ({', '.join(row['not_ready_kinds'])})"
    return "--filter passed: the rollout did not pass"


def trajectory(row: dict[str, Any], data: RolloutData) -> dict[str, Any]:
    """The ATIF document of a selected row; :class:`ContagentError` when a step cannot
    be written as ATIF (the rollout is then left out with that reason)."""
    rid = row["rollout_id"]
    turns = branch_turns(row["steps"], row["drop_reasoning"])
    if not turns:
        raise ContagentError(f"rollout {rid}: no steps")
    usage = {s["exchange_index"]: s["usage"] for s in row["steps"]}
    tokens = _step_tokens(data)
    root = row["steps"][-1]["branch"]
    docs = {
        b: _branch_document(row, b, branch, data, usage, tokens) for b, branch in enumerate(turns)
    }
    doc = docs.pop(root)
    doc["trajectory_id"] = rid
    doc["extra"] = {
        "rollout_id": rid,
        "branch": root,
        "experiment": row.get("experiment"),
        "reward": row.get("reward"),
        "passed": row.get("passed"),
        "status": row.get("status"),
        "stop_condition": row.get("stop_condition"),
    }
    if docs:
        doc["subagent_trajectories"] = list(docs.values())
    return doc


def _step_tokens(data: RolloutData) -> dict[int, StepTokens]:
    """Each kept step's token data, when every kept step has sound token data."""
    plan = data.tokens
    return {} if plan is None else {s.index: s for s in plan.steps}


def _branch_document(
    row: dict[str, Any],
    branch: int,
    turns: list[Turn],
    data: RolloutData,
    usage: dict[int, dict[str, int] | None],
    tokens: dict[int, StepTokens],
) -> dict[str, Any]:
    rid = row["rollout_id"]
    steps: list[dict[str, Any]] = []
    for turn in turns:
        role = turn.message["role"]
        if role == "tool":
            _observe(steps, turn.message, rid)
        elif role in _SOURCES:
            steps.append(_step(len(steps) + 1, turn, branch, data, usage, tokens, rid))
        else:
            raise ContagentError(f"rollout {rid}: a {role!r} message has no ATIF step source")
    agent = {
        "name": data.agent or UNKNOWN,
        "version": data.agent_version or UNKNOWN,
        "model_name": row.get("model"),
        "tool_definitions": data.branch_tools.get(branch, []),
    }
    own = [s["metrics"] for s in steps if "metrics" in s]
    return {
        "schema_version": ATIF_VERSION,
        "session_id": rid,
        "trajectory_id": f"{rid}.branch-{branch}",
        "agent": agent,
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": sum(m.get("prompt_tokens", 0) for m in own),
            "total_completion_tokens": sum(m.get("completion_tokens", 0) for m in own),
            "total_cached_tokens": sum(m.get("cached_tokens", 0) for m in own),
            "total_steps": len(steps),
        },
        "extra": {"branch": branch},
    }


def _step(
    step_id: int,
    turn: Turn,
    branch: int,
    data: RolloutData,
    usage: dict[int, dict[str, int] | None],
    tokens: dict[int, StepTokens],
    rid: str,
) -> dict[str, Any]:
    message = turn.message
    source = _SOURCES[message["role"]]
    step: dict[str, Any] = {
        "step_id": step_id,
        "source": source,
        "message": message["content"] or "",
    }
    copied = turn.branch != branch or (source == "agent" and not turn.response)
    if source == "agent":
        if message["reasoning_content"] is not None:
            step["reasoning_content"] = message["reasoning_content"]
        if message["tool_calls"]:
            step["tool_calls"] = [_tool_call(c, rid) for c in message["tool_calls"]]
        if not copied:
            step["llm_call_count"] = 1
            step["extra"] = {"exchange_index": turn.step}
            metrics = _metrics(usage.get(turn.step), data.cached_tokens.get(turn.step))
            if turn.step in tokens:
                found = tokens[turn.step]
                metrics["prompt_token_ids"] = found.prompt
                metrics["completion_token_ids"] = found.sampled
                metrics["logprobs"] = found.logprobs
            if metrics:
                step["metrics"] = metrics
    if copied:
        step["is_copied_context"] = True
    return step


def _metrics(usage: dict[str, int] | None, cached: int | None) -> dict[str, Any]:
    if usage is None:
        return {}
    metrics: dict[str, Any] = {
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
    }
    if cached is not None:
        metrics["cached_tokens"] = cached
    return metrics


def _tool_call(call: dict[str, Any], rid: str) -> dict[str, Any]:
    call_id, name = call["id"], call["function"]["name"]
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise ContagentError(f"rollout {rid}: a tool call without an id or a function name")
    arguments = object_arguments(call["function"]["arguments"], rid, call_id, "atif")
    return {"tool_call_id": call_id, "function_name": name, "arguments": arguments}


def _observe(steps: list[dict[str, Any]], message: dict[str, Any], rid: str) -> None:
    """Add a tool message to the observation of the agent step before it."""
    call_id = message["tool_call_id"]
    last = steps[-1] if steps else None
    if last is None or last["source"] != "agent":
        raise ContagentError(f"rollout {rid}: tool result {call_id!r} follows no agent step")
    calls = {c["tool_call_id"] for c in last.get("tool_calls", ())}
    if call_id is not None and call_id not in calls:
        raise ContagentError(
            f"rollout {rid}: tool result {call_id!r} answers no call of the agent step before it"
        )
    result: dict[str, Any] = {"source_call_id": call_id, "content": message["content"]}
    last.setdefault("observation", {"results": []})["results"].append(result)


class Atif:
    """The ``atif`` format (see the module docstring)."""

    name = "atif"
    document_version = ATIF_VERSION
    rows_are = "trajectories"

    def left_out_reason(self, row: dict[str, Any], filter: str) -> str | None:
        return left_out_reason(row, filter)

    def document(self, row: dict[str, Any], data: RolloutData) -> dict[str, Any]:
        return trajectory(row, data)
