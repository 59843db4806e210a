"""Build raw exchange logs the way the recording proxy writes them.

Used for the sample data in ``data/``, the property tests and the export
benchmark, so all three exercise the same OpenHands-shaped requests: content
as lists of text parts, the full history resent each step, tools
terminal/file_editor/finish.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import orjson

from contagent.layout import RolloutPaths
from contagent.rawlog.records import outcome_record, request_record


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


TOOLS: list[dict[str, Any]] = [
    _fn(
        "terminal",
        "Execute a bash command in the terminal.",
        {"command": {"type": "string"}, "is_input": {"type": "boolean"}},
        ["command"],
    ),
    _fn(
        "file_editor",
        "View, create and edit files.",
        {
            "command": {"type": "string"},
            "path": {"type": "string"},
            "file_text": {"type": "string"},
        },
        ["command", "path"],
    ),
    _fn(
        "finish",
        "Signals the completion of the current task.",
        {"message": {"type": "string"}, "summary": {"type": "string"}},
        ["message"],
    ),
]

SYSTEM_PROMPT = (
    "You are OpenHands agent, a helpful AI assistant that can interact with a computer to "
    "solve tasks.\n<ROLE>Your primary role is to assist users by executing commands, "
    "modifying code, and solving technical problems effectively.</ROLE>\n"
)


def parts(text: str) -> list[dict[str, str]]:
    """OpenHands sends every content as a list of text parts."""
    return [{"type": "text", "text": text}]


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
    }


def assistant(
    text: str | None = None, *calls: dict[str, Any], reasoning: str | None = None
) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = list(calls)
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return msg


class RolloutBuilder:
    """Plays an agent against a scripted model and records what a proxy would record."""

    def __init__(
        self,
        rollout_id: str,
        task: str,
        *,
        model: str = "qwen3-coder-30b",
        system_prompt: str = SYSTEM_PROMPT,
        tools: list[dict[str, Any]] | None = None,
        clock: float = 1_764_000_000.0,
    ) -> None:
        self.rollout_id = rollout_id
        self.model = model
        self.tools = copy.deepcopy(TOOLS if tools is None else tools)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": parts(system_prompt)},
            {"role": "user", "content": parts(task)},
        ]
        self.lines: list[bytes] = []
        self.index = 0
        self.clock = clock

    # -- history -----------------------------------------------------------
    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": parts(text)})

    def tool_output(self, call_id: str, name: str, text: str, fragments: int = 1) -> None:
        """Append a tool result; ``fragments > 1`` splits it the way OpenHands sometimes does."""
        pieces = text.split("\n", fragments - 1) if fragments > 1 else [text]
        for piece in pieces:
            self.messages.append(
                {"role": "tool", "tool_call_id": call_id, "name": name, "content": parts(piece)}
            )

    def replay(self, message: dict[str, Any]) -> None:
        """The agent puts the model's answer into its history (as OpenHands does)."""
        replayed: dict[str, Any] = {
            "role": "assistant",
            "content": parts(message.get("content") or ""),
        }
        if message.get("tool_calls"):
            replayed["tool_calls"] = copy.deepcopy(message["tool_calls"])
        self.messages.append(replayed)

    # -- records -----------------------------------------------------------
    def _tick(self, dt: float = 0.5) -> float:
        self.clock += dt
        return round(self.clock, 3)

    def request(
        self, *, body: Any = None, stream: bool = False, body_text: str | None = None
    ) -> int:
        """Record a request; ``body_text`` records a body the proxy could not parse as JSON."""
        if body is None and body_text is None:
            # no copies: the record is serialised below, before the history changes
            body = {
                "messages": self.messages,
                "model": self.model,
                "tools": self.tools,
                "prompt_cache_key": self.rollout_id,
            }
            if stream:
                body["stream"] = True
        wire = orjson.dumps(body) if body_text is None else body_text.encode()
        index = self.index
        self.index += 1
        self.lines.append(
            orjson.dumps(
                request_record(
                    index=index,
                    rollout_id=self.rollout_id,
                    time=self._tick(),
                    method="POST",
                    path="/v1/chat/completions",
                    headers={"content-type": "application/json", "x-stainless-retry-count": "0"},
                    body=body,
                    body_text=body_text,
                    body_sha256=hashlib.sha256(wire).hexdigest(),
                    body_bytes=len(wire),
                    stream=stream,
                    upstream_changes=[],
                )
            )
        )
        return index

    def outcome(
        self,
        index: int,
        outcome: str,
        *,
        message: dict[str, Any] | None = None,
        finish_reason: str | None = None,
        usage: dict[str, int] | bool | None = True,
        status: int | None = 200,
        error: str | None = None,
        response: Any = None,
        stream_events: list[str] | None = None,
    ) -> None:
        if usage is True:
            prompt = sum(len(orjson.dumps(m)) for m in self.messages) // 4
            completion = max(1, len(orjson.dumps(message)) // 4) if message else 0
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        elif usage is False:
            usage = None
        if response is None and message is not None:
            reason = finish_reason or ("tool_calls" if message.get("tool_calls") else "stop")
            response = {
                "id": f"chatcmpl-{self.rollout_id}-{index}",
                "object": "chat.completion",
                "created": int(self.clock),
                "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            }
            if usage:
                response["usage"] = usage
        started = self._tick(0.01)
        record = outcome_record(
            index=index,
            rollout_id=self.rollout_id,
            outcome=outcome,
            status=status,
            client_status=status if status is not None else 502,
            started=started,
            first_byte=self._tick(0.2) if status is not None else None,
            ended=self._tick(1.0),
            response=response,
            stream_events=stream_events,
            usage=usage or None,
            finish_reasons=[c.get("finish_reason") for c in response.get("choices", [])]
            if isinstance(response, dict)
            else [],
            error=error,
        )
        self.lines.append(orjson.dumps(record))

    def raw_line(self, line: bytes) -> None:
        """Append bytes as one line of the log (a torn write, say)."""
        self.lines.append(line)

    def step(self, message: dict[str, Any], *, consume: bool = True, **outcome: Any) -> int:
        """One completed exchange; the agent then replays the answer unless ``consume=False``."""
        index = self.request()
        self.outcome(index, outcome.pop("outcome", "completed"), message=message, **outcome)
        if consume:
            self.replay(message)
        return index

    def write(self, root: Path, result: dict[str, Any] | None = None) -> RolloutPaths:
        paths = RolloutPaths.for_rollout(Path(root), self.rollout_id)
        paths.root.mkdir(parents=True, exist_ok=True)
        paths.exchanges.write_bytes(b"".join(line + b"\n" for line in self.lines))
        if result is not None:
            full = {
                "schema_version": 1,
                "rollout_id": self.rollout_id,
                "model": self.model,
                **result,
            }
            paths.result.write_bytes(orjson.dumps(full, option=orjson.OPT_INDENT_2) + b"\n")
        return paths
