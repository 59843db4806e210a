"""A scripted OpenAI-compatible server: the one stand-in the tests use, for the LLM itself.

A script is a sequence of *moves*, one consumed per request in arrival order
(``GET .../models`` is answered without consuming one), or a callable that
picks the move from the :class:`StubRequest`::

    stub = start_stub_in_thread([
        Reply(tool_calls=[ToolCall("terminal", {"command": "ls"})]),
        Reply(content="done", finish_reason="stop"),
    ])
    client = openai.OpenAI(base_url=stub.url + "/v1", api_key="x")
    ...
    stub.requests   # what it received
    stub.cancelled  # indices of requests whose client went away before the end
    stub.stop()

:class:`Reply` answers as JSON, or as an SSE stream when the request says
``"stream": true`` (usage in a final chunk when ``stream_options.include_usage``).
:class:`Fast` is a fixed canned answer for benchmarks.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from contagent._loopthread import LoopThread


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


class LLMStub:
    """The stub server (async). Most callers want :func:`start_stub_in_thread`."""

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.requests: list[StubRequest] = []
        self.cancelled: list[int] = []
        self._script = script
        self._moves = iter(script) if isinstance(script, Sequence) else None
        self._counter = itertools.count()
        self._runner: web.ServerRunner | None = None
        self._fast_json: bytes = b""
        self._fast_stream: list[bytes] = []
        if isinstance(script, Fast):
            self._prepare_fast(script)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        server = web.Server(self._handle, handler_cancellation=True)
        self._runner = web.ServerRunner(server, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _prepare_fast(self, fast: Fast) -> None:
        req = StubRequest(0, "POST", "/v1/chat/completions", {}, b"", {"model": "stub"})
        self._fast_json = orjson.dumps(completion_json(req, Reply(content=fast.content), "fast"))
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
        self._fast_stream = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
        self._fast_stream.append(b"data: [DONE]\n\n")

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        if isinstance(self._script, Fast):
            return await self._fast(request, body)
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        req = StubRequest(
            next(self._counter),
            request.method,
            request.raw_path,
            dict(request.headers),
            body,
            parsed,
        )
        self.requests.append(req)
        if request.method == "GET" and request.path.rstrip("/").endswith("/models"):
            data = {
                "object": "list",
                "data": [{"id": "stub", "object": "model", "created": 0, "owned_by": "contagent"}],
            }
            return web.json_response(data, dumps=lambda o: orjson.dumps(o).decode())
        move = self._next_move(req)
        if move is None:
            return web.json_response(
                {"error": {"message": "stub script exhausted", "type": "stub"}}, status=500
            )
        try:
            return await self._play(request, req, move)
        except (asyncio.CancelledError, ConnectionResetError):
            self.cancelled.append(req.index)
            raise

    def _next_move(self, req: StubRequest) -> Move | None:
        if self._moves is not None:
            return next(self._moves, None)
        assert callable(self._script)
        return self._script(req)

    async def _play(
        self, request: web.BaseRequest, req: StubRequest, move: Move
    ) -> web.StreamResponse:
        delay = getattr(move, "delay", 0.0)
        if delay:
            await asyncio.sleep(delay)
        cid = f"chatcmpl-stub-{req.index}"
        if isinstance(move, Reset):
            return await self._reset(request)
        if isinstance(move, Error):
            body = (
                move.body
                if isinstance(move.body, bytes)
                else (move.body.encode() if isinstance(move.body, str) else orjson.dumps(move.body))
            )
            return web.Response(status=move.status, body=body, content_type="application/json")
        if isinstance(move, Raw):
            return web.Response(status=move.status, body=move.body, content_type=move.content_type)
        if isinstance(move, Events):
            return await self._sse(request, list(move.payloads), move.chunk_delay, move.cut_after)
        if req.stream:
            return await self._sse(
                request, stream_payloads(req, move, cid), move.chunk_delay, move.cut_after
            )
        return web.Response(
            body=orjson.dumps(completion_json(req, move, cid)), content_type="application/json"
        )

    async def _sse(
        self,
        request: web.BaseRequest,
        payloads: list[str],
        chunk_delay: float,
        cut_after: int | None,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        for n, payload in enumerate(payloads):
            if cut_after is not None and n >= cut_after:
                return await self._reset(request)
            if chunk_delay and n:
                await asyncio.sleep(chunk_delay)
            await resp.write(b"data: " + payload.encode() + b"\n\n")
        await resp.write_eof()
        return resp

    async def _reset(self, request: web.BaseRequest) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            transport.abort()
        try:
            await asyncio.sleep(30)  # connection_lost cancels this handler at once
        except asyncio.CancelledError:
            pass
        return web.Response(status=500)

    async def _fast(self, request: web.BaseRequest, body: bytes) -> web.StreamResponse:
        self.requests.append(
            StubRequest(next(self._counter), request.method, request.raw_path, {}, b"", None)
        )
        if b'"stream":true' not in body and b'"stream": true' not in body:
            return web.Response(body=self._fast_json, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in self._fast_stream:
            await resp.write(chunk)
        await resp.write_eof()
        return resp


class RunningStub:
    """Handle on a stub served from a background thread."""

    def __init__(self, stub: LLMStub, thread: LoopThread) -> None:
        self.stub = stub
        self._thread = thread

    @property
    def url(self) -> str:
        return self.stub.url

    @property
    def requests(self) -> list[StubRequest]:
        return self.stub.requests

    @property
    def cancelled(self) -> list[int]:
        return self.stub.cancelled

    def stop(self) -> None:
        try:
            self._thread.call(self.stub.stop())
        finally:
            self._thread.close()

    def __enter__(self) -> RunningStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_stub_in_thread(script: Script, host: str = "127.0.0.1", port: int = 0) -> RunningStub:
    """Start the stub on its own event loop thread; returns once it listens."""
    stub = LLMStub(script, host, port)
    thread = LoopThread("contagent-llm-stub")
    try:
        thread.call(stub.start())
    except BaseException:
        thread.close()
        raise
    return RunningStub(stub, thread)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m contagent.testing.llm_stub --fast [--port N]``: a benchmark upstream process.

    Prints ``listening on URL`` once ready; runs until SIGTERM/SIGINT.
    """
    import argparse
    import signal
    import sys

    from contagent._loopthread import new_event_loop

    parser = argparse.ArgumentParser(prog="llm_stub")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stream-chunks", type=int, default=500)
    args = parser.parse_args(argv)
    stub = LLMStub(Fast(stream_chunks=args.stream_chunks), args.host, args.port)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stub.start()
        sys.stdout.write(f"listening on {stub.url}\n")
        sys.stdout.flush()
        await stop.wait()
        await stub.stop()

    loop = new_event_loop()
    try:
        loop.run_until_complete(serve())
    finally:
        loop.close()


if __name__ == "__main__":
    main()
