"""What the rollout page shows, built from one results row (and raw exchanges from its log).

Steps and excluded exchanges are laid out in exchange order, so an exclusion
stands where it happened; each step shows what its request added to the
branch it extends (the model saw the branch so far plus that) and the response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contagent.errors import ContagentError
from contagent.layout import RolloutPaths
from contagent.rawlog.read import MAX_RAW_LOG_BYTES, parse_stream
from contagent.rawlog.stream import LogStream
from contagent.wire import chat

MAX_FILE_BYTES = 2 * 1024 * 1024  # of a run's .log/.result/.err, the last this many bytes


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


@dataclass
class ToolCallView:
    id: str | None
    name: str | None
    arguments: str  # pretty-printed JSON, or the raw string when it is not JSON
    arguments_json: bool


@dataclass
class Message:
    role: str
    text: str
    reasoning: str | None = None
    tool_calls: list[ToolCallView] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    merged_fragments: int | None = None  # a tool output merged from this many fragments
    resent_of: int | None = None  # an assistant message re-sent: the response of this step


def message(msg: Any, repairs: dict[str, int]) -> Message:
    if not isinstance(msg, dict):
        return Message(role="?", text=pretty(msg))
    calls = []
    for call in chat.tool_calls(msg):
        raw = (_dict(call.get("function")) or {}).get("arguments")
        try:
            args, ok = pretty(json.loads(raw if isinstance(raw, str) else "")), True
        except (TypeError, ValueError):
            args, ok = (raw if isinstance(raw, str) else pretty(raw)), False
        calls.append(ToolCallView(_str(call.get("id")), chat.call_name(call), args, ok))
    reasoning = msg.get("reasoning_content", msg.get("reasoning"))
    call_id = _str(msg.get("tool_call_id"))
    return Message(
        role=str(msg.get("role", "?")),
        text=chat.message_text(msg.get("content")),
        reasoning=chat.message_text(reasoning) if reasoning else None,
        tool_calls=calls,
        tool_call_id=call_id,
        name=_str(msg.get("name")),
        merged_fragments=repairs.get(call_id) if call_id and msg.get("role") == "tool" else None,
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass
class Item:
    """One exchange of the rollout: a step of a branch or an excluded exchange."""

    index: int
    kind: str  # "step" or "excluded"
    usage: dict[str, Any] | None = None
    branch: int | None = None
    extends: int | None = None
    new_branch: bool = False
    added: list[Message] = field(default_factory=list)
    response: Message | None = None
    finish_reason: str | None = None
    consumed: bool | None = None
    truncated: bool | None = None
    reason: str | None = None
    duplicate_of: int | None = None
    detail: str | None = None


def timeline(row: dict[str, Any]) -> list[Item]:
    repairs = {
        r["tool_call_id"]: r.get("fragments", 0)
        for r in _list(row.get("repairs"))
        if isinstance(r, dict) and isinstance(r.get("tool_call_id"), str)
    }
    items: list[Item] = []
    for step in _list(row.get("steps")):
        if not isinstance(step, dict):
            continue
        added = [message(m, repairs) for m in _list(step.get("messages"))]
        extends = step.get("extends")
        if extends is not None and added and added[0].role == "assistant":
            added[0].resent_of = extends  # the client re-sends the response it consumed
        items.append(
            Item(
                index=_index(step),
                kind="step",
                usage=_dict(step.get("usage")),
                branch=step.get("branch"),
                extends=extends,
                new_branch=extends is None,
                added=added,
                response=message(step.get("response"), repairs),
                finish_reason=step.get("finish_reason"),
                consumed=step.get("consumed"),
                truncated=step.get("truncated"),
            )
        )
    for exc in _list(row.get("excluded")):
        if isinstance(exc, dict):
            items.append(
                Item(
                    index=_index(exc),
                    kind="excluded",
                    usage=_dict(exc.get("usage")),
                    reason=_str(exc.get("reason")),
                    duplicate_of=exc.get("duplicate_of"),
                    detail=_str(exc.get("detail")),
                )
            )
    items.sort(key=lambda i: i.index)
    return items


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _index(record: dict[str, Any]) -> int:
    value = record.get("exchange_index")
    return value if isinstance(value, int) else -1


@dataclass
class RawExchange:
    index: int
    request: dict[str, Any] | None
    outcome: dict[str, Any] | None
    log_path: str


def raw_exchange(
    row: dict[str, Any], index: int, max_raw_log: int = MAX_RAW_LOG_BYTES
) -> RawExchange:
    """Exchange ``index`` of the raw log the row names, refused unless it is that very log.

    Only a raw log (``exchanges.jsonl``, or the same log compacted) whose record
    stream's SHA-256 equals the row's ``raw_log.sha256`` is read: a row cannot make
    the viewer show any other file.
    """
    ref = _dict(row.get("raw_log")) or {}
    rollout = RolloutPaths.of_raw_log(Path(str(ref.get("path") or "")))
    path = rollout.raw_log if rollout is not None else Path(str(ref.get("path") or ""))
    if rollout is None or not path.is_file():
        raise ContagentError(f"the raw log {path} is not there")
    stream = LogStream(path, max_raw_log)
    try:
        raw = parse_stream(stream)
    except ContagentError:
        if not stream.complete or stream.digest.hexdigest() == ref.get("sha256"):
            raise
        raw = None
    if raw is None or raw.sha256 != ref.get("sha256"):
        raise ContagentError(f"the raw log {path} changed since this row was written")
    if index not in raw.requests and index not in raw.outcomes:
        raise ContagentError(f"the raw log has no exchange {index}")
    return RawExchange(index, raw.requests.get(index), raw.outcomes.get(index), str(path))


def tail_text(path: Path) -> tuple[str, bool]:
    """The last ``MAX_FILE_BYTES`` of a text file, and whether it was cut."""
    size = path.stat().st_size
    with path.open("rb") as f:
        if size > MAX_FILE_BYTES:
            f.seek(size - MAX_FILE_BYTES)
        data = f.read(MAX_FILE_BYTES)
    return data.decode("utf-8", errors="replace"), size > MAX_FILE_BYTES


def facts(row: dict[str, Any]) -> dict[str, Any]:
    """The row's list-valued and nested fields, made safe to show whatever their shape."""
    usage = _dict(row.get("token_usage")) or {}
    tokens = {}
    for part in ("billed", "selected", "excluded"):
        tokens[part] = (_dict(usage.get(part)) or {}).get("total_tokens")
    return {
        "steps": len(_list(row.get("steps"))),
        "excluded": len(_list(row.get("excluded"))),
        "tokens": tokens,
        "repairs": [r for r in _list(row.get("repairs")) if isinstance(r, dict)],
        "tools": _list(row.get("tools")),
    }


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None
