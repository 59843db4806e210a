"""A scripted OpenAI-compatible server: the one stand-in the tests use, for the LLM itself.

A script is a sequence of *moves*, one consumed per request in arrival order
(``GET .../models`` lists ``models`` without consuming one), or a callable that
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
``"stream": true`` (usage in a final chunk when ``stream_options.include_usage``);
on a ``.../responses`` route it answers in the Responses API's shape
(:mod:`contagent.testing.responses_moves`), on ``.../messages`` in the Anthropic
Messages API's (:mod:`contagent.testing.messages_moves`).
:class:`Fast` is a fixed canned answer for benchmarks. The moves and their
rendering live in :mod:`contagent.testing.llm_moves`; this module serves them
and re-exports them, so scripts need only this one import.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import orjson
from aiohttp import web

from contagent._loopthread import InThread
from contagent.http_site import HttpSite
from contagent.testing.llm_moves import (
    Error,
    Events,
    Fast,
    Move,
    Raw,
    Reply,
    Reset,
    Script,
    StubRequest,
    ToolCall,
    completion_json,
    fast_bodies,
    fast_token_bodies,
    stream_payloads,
)
from contagent.testing.messages_moves import (
    count_tokens_json,
    is_count_tokens,
    is_messages,
    message_events,
    message_json,
)
from contagent.testing.responses_moves import is_responses, response_events, response_json
from contagent.testing.stub_server_info import (
    effort_answer,
    inline_system_answer,
    is_effort_question,
    is_inline_system_question,
    is_top_logprob_question,
    render_answer,
    top_logprob_answer,
)

#: the vLLM version the stub says it is (``GET /version``), as the servers it stands for
STUB_VLLM_VERSION = "0.32.0"
#: the context length its model list gives each model, as vLLM's does
STUB_MAX_MODEL_LEN = 32768

# The moves are part of this module's interface: scripts import them from here.
__all__ = [
    "Error",
    "Events",
    "Fast",
    "LLMStub",
    "Move",
    "Raw",
    "Reply",
    "Reset",
    "RunningStub",
    "Script",
    "StubRequest",
    "ToolCall",
    "completion_json",
    "start_stub_in_thread",
    "stream_payloads",
]


class LLMStub(HttpSite):
    """The stub server (async). Most callers want :func:`start_stub_in_thread`."""

    def __init__(
        self,
        script: Script,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Sequence[str] = ("stub",),
        owned_by: str = "vllm",
        logprobs_mode: str = "raw_logprobs",
        render_defaults: dict[str, object] | None = None,
        refuses_inline_system: bool = False,
    ) -> None:
        super().__init__(host, port)
        #: its template refuses a system message after the first turn (Qwen3.5's does)
        self.refuses_inline_system = refuses_inline_system
        #: the ``--logprobs-mode`` it answers top-logprob questions in
        self.logprobs_mode = logprobs_mode
        #: the defaults ``/v1/chat/completions/render`` gives; None: no render route
        self.render_defaults = render_defaults
        #: the top-logprob questions and render requests answered (never in ``requests``)
        self.server_questions: list[StubRequest] = []
        #: whose models these are; a stub not owned by vllm has no ``GET /version`` either
        self.owned_by = owned_by
        self.models = tuple(models)
        self.requests: list[StubRequest] = []
        self.cancelled: list[int] = []
        self._script = script
        self._moves = iter(script) if isinstance(script, Sequence) else None
        self._counter = itertools.count()
        self._fast_json, self._fast_stream = (
            fast_bodies(script) if isinstance(script, Fast) else (b"", [])
        )
        self._fast_tokens = fast_token_bodies(script) if isinstance(script, Fast) else (b"", [])

    @property
    def url(self) -> str:
        return self.origin

    async def start(self) -> None:
        server = web.Server(self._handle, handler_cancellation=True)
        runner = web.ServerRunner(server, handler_cancellation=True, shutdown_timeout=0.5)
        await self.listen(runner, backlog=1024)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        if isinstance(self._script, Fast):
            return await self._fast(request, body)
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        if request.method == "GET" and request.path == "/version":
            return self._listing(request) or web.Response(status=404)  # not one of the requests
        about = self._about_server(
            StubRequest(-1, request.method, request.raw_path, dict(request.headers), body, parsed)
        )
        if about is not None:
            return about
        req = StubRequest(
            next(self._counter),
            request.method,
            request.raw_path,
            dict(request.headers),
            body,
            parsed,
        )
        self.requests.append(req)
        listing = self._listing(request)
        if listing is not None:
            return listing
        if request.method == "POST" and is_count_tokens(req):
            return web.json_response(count_tokens_json(req))
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

    def _about_server(self, req: StubRequest) -> web.Response | None:
        """The top-logprob questions and render requests a server check sends (no move
        consumed, not one of the requests): :mod:`contagent.testing.stub_server_info`."""
        path = req.path.partition("?")[0]
        if self.owned_by != "vllm":
            return None
        if req.method == "POST" and path.endswith("/chat/completions/render"):
            self.server_questions.append(req)
            if self.render_defaults is None:
                return web.json_response({"detail": "Not Found"}, status=404)
            return web.json_response(render_answer(req.json, self.render_defaults))
        if is_inline_system_question(req.method, path, req.json):
            self.server_questions.append(req)
            status, body = inline_system_answer(self.refuses_inline_system)
            return web.json_response(body, status=status)
        if is_effort_question(req.method, path, req.json):
            self.server_questions.append(req)
            return web.json_response(effort_answer(req.json))
        if is_top_logprob_question(req.method, path, req.json):
            self.server_questions.append(req)
            return web.json_response(
                top_logprob_answer(req.json, self.logprobs_mode, len(self.server_questions))
            )
        return None

    def _listing(self, request: web.BaseRequest) -> web.Response | None:
        """``GET .../models`` and ``GET /version`` answer as vLLM does (no move consumed)."""
        if request.method != "GET":
            return None
        path = request.path.rstrip("/")
        if path.endswith("/models"):
            data: dict[str, object] = {
                "object": "list",
                "data": [
                    {
                        "id": m,
                        "object": "model",
                        "created": 0,
                        "owned_by": self.owned_by,
                        "max_model_len": STUB_MAX_MODEL_LEN,
                    }
                    for m in self.models
                ],
            }
        elif path == "/version" and self.owned_by == "vllm":
            data = {"version": STUB_VLLM_VERSION}
        else:
            return None
        return web.json_response(data, dumps=lambda o: orjson.dumps(o).decode())

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
        if is_responses(req):
            rid = f"resp_stub_{req.index}"
            if req.stream:
                names, payloads = zip(*response_events(req, move, rid), strict=True)
                return await self._sse(
                    request, list(payloads), move.chunk_delay, move.cut_after, list(names)
                )
            return web.Response(
                body=orjson.dumps(response_json(req, move, rid)), content_type="application/json"
            )
        if is_messages(req):
            mid = f"msg_stub_{req.index}"
            if req.stream:
                names, payloads = zip(*message_events(req, move, mid), strict=True)
                return await self._sse(
                    request, list(payloads), move.chunk_delay, move.cut_after, list(names)
                )
            return web.Response(
                body=orjson.dumps(message_json(req, move, mid)), content_type="application/json"
            )
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
        names: list[str] | None = None,
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
            head = f"event: {names[n]}\n" if names else ""
            await resp.write(f"{head}data: {payload}\n\n".encode())
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
        listing = self._listing(request)
        if listing is not None:
            return listing
        self.requests.append(
            StubRequest(next(self._counter), request.method, request.raw_path, {}, b"", None)
        )
        tokens = b'"return_token_ids":true' in body  # how the proxy asks for them
        json_body, stream = self._fast_tokens if tokens else (self._fast_json, self._fast_stream)
        if b'"stream":true' not in body and b'"stream": true' not in body:
            return web.Response(body=json_body, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in stream:
            await resp.write(chunk)
        await resp.write_eof()
        return resp


class RunningStub(InThread[LLMStub]):
    """Handle on a stub served from a background thread."""

    @property
    def stub(self) -> LLMStub:
        return self.service

    @property
    def url(self) -> str:
        return self.service.url

    @property
    def requests(self) -> list[StubRequest]:
        return self.service.requests

    @property
    def cancelled(self) -> list[int]:
        return self.service.cancelled


def start_stub_in_thread(
    script: Script,
    host: str = "127.0.0.1",
    port: int = 0,
    models: Sequence[str] = ("stub",),
    owned_by: str = "vllm",
    logprobs_mode: str = "raw_logprobs",
    render_defaults: dict[str, object] | None = None,
    refuses_inline_system: bool = False,
) -> RunningStub:
    """Start the stub on its own event loop thread; returns once it listens.
    ``logprobs_mode`` and ``render_defaults``: :mod:`contagent.testing.stub_server_info`
    (``VLLM_DEFAULTS`` are vLLM's own)."""
    stub = LLMStub(
        script, host, port, models, owned_by, logprobs_mode, render_defaults, refuses_inline_system
    )
    return RunningStub(stub, "contagent-llm-stub")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m contagent.testing.llm_stub [--port N]``: :class:`Fast` as a benchmark upstream.

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
