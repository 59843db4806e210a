"""The moves of the scripted LLM stub, and how each becomes response bytes.

A move is what :mod:`contagent.testing.llm_stub` does with one request; the
functions here render a :class:`Reply` as a chat completion or as the chunk
events of a vLLM-style stream, and :class:`Fast` as its canned bodies. They are
pure, so tests can feed the same rendering to the proxy's parsers directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str | dict[str, Any] = "{}"
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return orjson.dumps(self.arguments).decode()


@dataclass(frozen=True)
class Reply:
    """A completion. ``chunks``: pieces content/reasoning/arguments are split into when streamed.

    ``delay`` waits before the response starts, ``chunk_delay`` between stream
    events; ``cut_after`` closes the connection after that many events, with
    no ``[DONE]`` (a stream broken mid-way).
    """

    content: str | None = "ok"
    tool_calls: Sequence[ToolCall] = ()
    reasoning_content: str | None = None
    finish_reason: str | None = None  # default: tool_calls when there are any, else stop
    usage: dict[str, int] | None = None  # default: derived from the sizes
    model: str | None = None  # default: the request's model
    delay: float = 0.0
    chunks: int = 3
    chunk_delay: float = 0.0
    cut_after: int | None = None


@dataclass(frozen=True)
class Error:
    """An HTTP error status with a body (a dict is sent as JSON)."""

    status: int
    body: bytes | str | dict[str, Any] = (
        b'{"error": {"message": "stub error", "type": "server_error"}}'
    )
    delay: float = 0.0


@dataclass(frozen=True)
class Raw:
    """Any body as is, e.g. malformed JSON with status 200."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    delay: float = 0.0


@dataclass(frozen=True)
class Events:
    """A raw SSE stream: each payload sent as ``data: <payload>\\n\\n`` (e.g. Responses-API events)."""

    payloads: Sequence[str]
    chunk_delay: float = 0.0
    cut_after: int | None = None


@dataclass(frozen=True)
class Reset:
    """Close the connection without any response (after ``delay``)."""

    delay: float = 0.0


@dataclass(frozen=True)
class Fast:
    """Benchmark mode: the same canned JSON for every request, or a ``stream_chunks``-event stream."""

    content: str = "ok"
    stream_chunks: int = 500
    chunk_text: str = "tok "


Move = Reply | Error | Raw | Events | Reset


@dataclass
class StubRequest:
    index: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    time: float = field(default_factory=time.time)

    @property
    def stream(self) -> bool:
        return isinstance(self.json, dict) and self.json.get("stream") is True


Script = Sequence[Move] | Callable[[StubRequest], Move] | Fast


def _usage(req: StubRequest, reply: Reply) -> dict[str, int]:
    if reply.usage is not None:
        return dict(reply.usage)
    out_chars = len(reply.content or "") + len(reply.reasoning_content or "")
    out_chars += sum(len(t.name) + len(t.arguments_json) for t in reply.tool_calls)
    prompt, completion = max(1, len(req.body) // 4), max(1, out_chars // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _split(text: str, n: int) -> list[str]:
    if n <= 1 or len(text) <= 1:
        return [text]
    step = -(-len(text) // n)
    return [text[i : i + step] for i in range(0, len(text), step)]


def completion_json(req: StubRequest, reply: Reply, cid: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning_content is not None:
        message["reasoning_content"] = reply.reasoning_content
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": t.id or f"call_{cid}_{i}", "type": "function",
             "function": {"name": t.name, "arguments": t.arguments_json}}
            for i, t in enumerate(reply.tool_calls)
        ]  # fmt: skip
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()),
        "model": reply.model or _model(req),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
        "usage": _usage(req, reply),
    }  # fmt: skip


def _model(req: StubRequest) -> str:
    return str(req.json.get("model", "stub")) if isinstance(req.json, dict) else "stub"


def _finish(reply: Reply) -> str | None:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def stream_payloads(req: StubRequest, reply: Reply, cid: str) -> list[str]:
    """The chunk events of ``reply`` as a vLLM-style chat stream, ``[DONE]`` included."""
    head = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": reply.model or _model(req),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return orjson.dumps(
            {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        ).decode()

    out = [chunk({"role": "assistant", "content": ""})]
    for part in (
        _split(reply.reasoning_content or "", reply.chunks) if reply.reasoning_content else []
    ):
        out.append(chunk({"reasoning_content": part}))
    for part in _split(reply.content, reply.chunks) if reply.content else []:
        out.append(chunk({"content": part}))
    for i, t in enumerate(reply.tool_calls):
        first = {"index": i, "id": t.id or f"call_{cid}_{i}", "type": "function",
                 "function": {"name": t.name, "arguments": ""}}  # fmt: skip
        out.append(chunk({"tool_calls": [first]}))
        for part in _split(t.arguments_json, reply.chunks):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, _finish(reply)))
    opts = req.json.get("stream_options") if isinstance(req.json, dict) else None
    if isinstance(opts, dict) and opts.get("include_usage"):
        out.append(orjson.dumps({**head, "choices": [], "usage": _usage(req, reply)}).decode())
    out.append("[DONE]")
    return out


def fast_bodies(fast: Fast) -> tuple[bytes, list[bytes]]:
    """The JSON body and the SSE events (``[DONE]`` included) :class:`Fast` sends, built once."""
    req = StubRequest(0, "POST", "/v1/chat/completions", {}, b"", {"model": "stub"})
    json_body = orjson.dumps(completion_json(req, Reply(content=fast.content), "fast"))
    head = {"id": "fast", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
    events = [
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "finish_reason": None,
                }
            ],
        }
    ]
    for _ in range(fast.stream_chunks - 3):
        events.append(
            {
                **head,
                "choices": [
                    {"index": 0, "delta": {"content": fast.chunk_text}, "finish_reason": None}
                ],
            }
        )
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": fast.stream_chunks,
        "total_tokens": fast.stream_chunks + 10,
    }
    events.append({**head, "choices": [], "usage": usage})
    stream = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    stream.append(b"data: [DONE]\n\n")
    return json_body, stream
