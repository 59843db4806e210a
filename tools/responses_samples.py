"""The sample rollouts on the Responses API, in ``data/rollouts/responses``.

Every chat scenario of :mod:`tools.samples` is recorded again as a
Responses-API agent would have sent it (``instructions`` + ``input`` items,
``output`` items, ``input_tokens``/``output_tokens``), with the same expected
outcome: each rule of the chat path, on the Responses path. Beside them, the
cases only this API has: a ``previous_response_id`` chain inside the log and
one pointing outside it, non-function tool definitions, and a rollout mixing
both APIs. ``python -m tools.responses_samples data/rollouts/responses``
rewrites them; a test checks the committed files equal what this module builds.
"""

from __future__ import annotations

import copy
import hashlib
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from contagent.wire.chat import message_text
from tools.rollouts import RolloutBuilder, assistant, call
from tools.sample_base import PASSED, TASK, Expected, solve
from tools.samples import SCENARIOS


def response_items(message: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """A chat assistant message as Responses output items (ids derived from ``key``)."""
    items: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{key}",
                "summary": [{"type": "summary_text", "text": message["reasoning_content"]}],
            }
        )
    text = message_text(message.get("content"))
    if text:
        items.append(
            {
                "type": "message",
                "id": f"msg_{key}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for n, c in enumerate(message.get("tool_calls") or []):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{key}_{n}",
                "call_id": c["id"],
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"],
                "status": "completed",
            }
        )
    return items


def input_items(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat messages as (instructions, Responses input items)."""
    instructions = None
    items: list[dict[str, Any]] = []
    for n, m in enumerate(messages):
        role = m.get("role")
        if role == "system" and n == 0:
            instructions = message_text(m.get("content"))
        elif role == "assistant":
            items += response_items(m, f"h{n}")
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m["tool_call_id"],
                    "output": message_text(m.get("content")),
                }
            )
        else:
            text = message_text(m.get("content"))
            items.append(
                {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}
            )
    return instructions, items


def _tools(tools: Any) -> Any:
    if not isinstance(tools, list):
        return tools
    return [{"type": "function", **t["function"]} if "function" in t else t for t in tools]


def _usage(usage: Any) -> Any:
    if not isinstance(usage, dict):
        return usage
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["total_tokens"],
    }


def _response(response: Any, index: int) -> Any:
    if not isinstance(response, dict) or "choices" not in response:
        return response  # an error body stays as the server sent it
    choice = response["choices"][0]
    cut = choice.get("finish_reason") == "length"
    out = {
        "id": f"resp_{response['id']}",
        "object": "response",
        "created_at": response.get("created"),
        "model": response.get("model"),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": response_items(choice["message"], f"o{index}"),
    }
    if "usage" in response:
        out["usage"] = _usage(response["usage"])
    return out


def convert_record(record: dict[str, Any], rollout_id: str) -> dict[str, Any]:
    """One chat raw-log record as the proxy records it on ``/v1/responses``."""
    rec = copy.deepcopy(record)
    rec["rollout_id"] = rollout_id
    if rec["type"] == "request" and isinstance(rec.get("body"), dict):
        body = rec["body"]
        instructions, items = input_items(body.pop("messages"))
        new: dict[str, Any] = {"model": body.pop("model")}
        if instructions is not None:
            new["instructions"] = instructions
        new["input"] = items
        if "tools" in body:
            new["tools"] = _tools(body.pop("tools"))
        new.update(body)
        rec["body"] = new
        rec["path"] = "/v1/responses"
        wire = orjson.dumps(new)
        rec["body_sha256"], rec["body_bytes"] = hashlib.sha256(wire).hexdigest(), len(wire)
    elif rec["type"] == "outcome":
        rec["response"] = _response(rec.get("response"), rec["index"])
        rec["usage"] = _usage(rec.get("usage"))
        rec["finish_reasons"] = []  # the Responses API has none
    return rec


# -- scenarios only the Responses API has ------------------------------------


def _records(b: RolloutBuilder) -> list[dict[str, Any]]:
    return [convert_record(orjson.loads(line), b.rollout_id) for line in b.lines]


def _held(item: dict[str, Any]) -> bool:
    """Is ``item`` one the server keeps for a chained request (an earlier output item)?"""
    return item["type"] in ("function_call", "reasoning") or item.get("role") == "assistant"


def chain(b: RolloutBuilder) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """previous_response_id: each request sends only the new items; the chain is in the log."""
    solve(b)
    records = _records(b)
    previous: str | None = None
    sent = 0
    for rec in records:
        if rec["type"] == "request":
            items = rec["body"]["input"]
            if previous is not None:
                rec["body"]["previous_response_id"] = previous
                # what the server already holds: the earlier input and its output items
                rec["body"]["input"] = [i for i in items[sent:] if not _held(i)]
            sent = len(items)
        else:
            previous = rec["response"]["id"]
    return records, PASSED


def chain_outside(b: RolloutBuilder) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """previous_response_id naming a response the log lacks: not training-ready."""
    records, result = chain(b)
    records[0]["body"]["previous_response_id"] = "resp_from_another_session"
    return records, result


def builtin_tools(b: RolloutBuilder) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A namespace of tools and a built-in web_search beside the functions: kept in the union."""
    solve(b)
    records, result = _records(b), PASSED
    extra = [
        {"type": "web_search"},
        {
            "type": "namespace",
            "name": "multi_agent",
            "description": "Sub-agents.",
            "tools": [{"type": "function", "name": "spawn_agent", "parameters": {}}],
        },
    ]
    for rec in records:
        if rec["type"] == "request":
            rec["body"]["tools"] = rec["body"]["tools"] + copy.deepcopy(extra)
    return records, result


def mixed(b: RolloutBuilder) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One rollout, both APIs: the agent on Responses, a summariser call on chat completions."""
    b.step(assistant(None, call("call_1", "terminal", command="cat ~/workspace/secret.txt")))
    b.tool_output("call_1", "terminal", "hunter2")
    saved, tools = b.messages, b.tools
    b.messages, b.tools = [{"role": "user", "content": "Summarise the events so far."}], []
    b.step(assistant("The secret is hunter2."), consume=False)
    b.messages, b.tools = saved, tools
    b.step(assistant(None, call("call_2", "finish", message="Done.")))
    records = [orjson.loads(line) for line in b.lines]
    summariser = {1}  # the request and outcome of index 1 stay on the chat route
    return [
        r if r["index"] in summariser else convert_record(r, b.rollout_id) for r in records
    ], PASSED


OWN: dict[
    str, tuple[Callable[[RolloutBuilder], tuple[list[dict[str, Any]], dict[str, Any]]], Expected]
] = {
    "chain": (chain, Expected(True)),
    "chain_outside": (chain_outside, Expected(False, reason="is not in this raw log")),
    "builtin_tools": (builtin_tools, Expected(True)),
    "mixed": (mixed, Expected(True, branches=2)),
}


#: Chat scenarios about the chat wire's own shapes (content parts, legacy ``function_call``,
#: the ``reasoning`` field name, unreadable bodies, torn lines), which have no Responses form.
CHAT_ONLY = frozenset(
    {
        "content_parts",
        "image_part",
        "legacy_function_call",
        "reasoning_field",
        "unreadable_body",
        "torn_line",
    }
)
#: The chat scenarios recorded again on the Responses API.
RECORDED_AGAIN = {name: s for name, s in SCENARIOS.items() if name not in CHAT_ONLY}


def expectations() -> dict[str, Expected]:
    """Expected outcome of every Responses sample, by rollout id."""
    out = {f"responses_{name}": expected for name, (_, expected) in RECORDED_AGAIN.items()}
    out.update({f"responses_{name}": expected for name, (_, expected) in OWN.items()})
    return out


def write_responses_samples(root: Path) -> list[Path]:
    """Write every Responses sample under ``root`` and, beside them, ``expected.json``."""
    root = Path(root)
    written: list[Path] = []
    expected: dict[str, Any] = {}
    for n, (name, (build, outcome)) in enumerate(RECORDED_AGAIN.items()):
        rid = f"responses_{name}"
        b = RolloutBuilder(rid, TASK, clock=1_765_000_000.0 + 1000 * n)
        result = build(b)
        written.append(_write(root, rid, _records(b), b, result))
        expected[rid] = {"about": (build.__doc__ or "").strip() or None, **asdict(outcome)}
    for n, (name, (own, outcome)) in enumerate(OWN.items()):
        rid = f"responses_{name}"
        b = RolloutBuilder(rid, TASK, clock=1_766_000_000.0 + 1000 * n)
        records, result = own(b)
        written.append(_write(root, rid, records, b, result))
        expected[rid] = {"about": (own.__doc__ or "").strip() or None, **asdict(outcome)}
    (root / "expected.json").write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2) + b"\n")
    return written


def _write(
    root: Path, rid: str, records: list[dict[str, Any]], b: RolloutBuilder, result: dict[str, Any]
) -> Path:
    b.lines = [orjson.dumps(r) for r in records]
    return b.write(root, result).root


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "data/rollouts/responses")
    for path in write_responses_samples(target):
        print(path)
