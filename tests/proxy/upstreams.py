"""Real upstream servers for end-to-end tests of what the scripted LLM does not do: a raw
TCP server that answers with given bytes (interim answers, odd framing, broken codings),
and uvicorn serving an ASGI app."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

#: the chat completion an aiohttp upstream of these tests answers with
COMPLETION = {
    "id": "c", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "zipped"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}  # fmt: skip


async def completion(request: web.BaseRequest) -> web.Response:
    """An :class:`AiohttpUpstream` handler answering :data:`COMPLETION`."""
    await request.read()
    return web.Response(body=orjson.dumps(COMPLETION), content_type="application/json")


class AiohttpUpstream:
    """An aiohttp low-level server with a given handler (optionally TLS), for what the
    scripted LLM does not do: gzip, Connection: close, odd model lists."""

    def __init__(self, handler: Any, ssl_context: Any = None, **server_kw: Any) -> None:
        self.handler, self.ssl_context, self.server_kw = handler, ssl_context, server_kw
        self.scheme = "https" if ssl_context is not None else "http"

    async def start(self) -> None:
        self.runner = web.ServerRunner(web.Server(self.handler, **self.server_kw))
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.ssl_context).start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        await self.runner.cleanup()

    @property
    def url(self) -> str:
        host = "localhost" if self.scheme == "https" else "127.0.0.1"
        return f"{self.scheme}://{host}:{self.port}"


class _LoopbackServer:
    """An asyncio stream server on a free loopback port; subclasses serve each connection."""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 request: its head, then a Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + (await reader.readexactly(length) if length else b"")


def closing(reply: bytes) -> bytes:
    """``reply`` with ``Connection: close`` in its final (non-1xx) response head: a server
    that closes after answering must say so, or its client may send the next request down
    the closing connection."""
    start = 0
    while reply.startswith(b"HTTP/1.1 1", start):  # interim answers come first
        end = reply.find(b"\r\n\r\n", start)
        if end < 0:
            return reply
        start = end + 4
    line_end = reply.find(b"\r\n", start)
    if line_end < 0:
        return reply
    return reply[:line_end] + b"\r\nConnection: close" + reply[line_end:]


class RawUpstream(_LoopbackServer):
    """Reads one HTTP/1.1 request per connection (head, then a Content-Length body) and
    answers with ``reply(request_bytes)`` plus ``Connection: close``, then closes."""

    def __init__(self, reply: bytes | Callable[[bytes], bytes]) -> None:
        self.reply = reply
        self.requests: list[bytes] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await read_request(reader)
            self.requests.append(request)
            writer.write(closing(self.reply(request) if callable(self.reply) else self.reply))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@dataclass(frozen=True)
class Close:
    """Send ``data`` (nothing by default) once the request is read, then close the
    connection, as a server does that times an idle keep-alive connection out just as a
    request goes down it (or that fails mid-answer)."""

    data: bytes = b""


class ScriptedConnections(_LoopbackServer):
    """Plays one script per connection, in the order the connections arrive: for each
    request read on it, the next answer, bytes sent on a kept-alive connection or a
    :class:`Close`. ``requests`` holds (connection number, request bytes). A connection
    whose script ran out stays open until the client closes it; a request the script has
    no answer for is kept and the connection closed."""

    def __init__(self, *scripts: list[bytes | Close]) -> None:
        self.scripts = list(scripts)
        self.connections = 0
        self.requests: list[tuple[int, bytes]] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.connections
        self.connections += 1
        script = self.scripts[number] if number < len(self.scripts) else []
        try:
            for move in script:
                self.requests.append((number, await read_request(reader)))
                writer.write(move.data if isinstance(move, Close) else move)
                await writer.drain()
                if isinstance(move, Close):
                    return
            self.requests.append((number, await read_request(reader)))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class Uvicorn:
    """uvicorn serving ``app`` on a free loopback port."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def start(self) -> None:
        import uvicorn

        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, lifespan="off", log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.task = asyncio.get_running_loop().create_task(self.server.serve())
        while not self.server.started:
            if self.task.done():
                self.task.result()
            await asyncio.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class ForwardProxy(_LoopbackServer):
    """A minimal outbound HTTP proxy: ``CONNECT`` tunnels and absolute-form requests, each
    connection piped to the target its first request names. Keeps those first heads."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from urllib.parse import urlsplit

        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            method, target, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
            if method == b"CONNECT":
                host, _, port = target.decode().rpartition(":")
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                url = urlsplit(target.decode())
                assert url.hostname is not None and url.port is not None
                up_reader, up_writer = await asyncio.open_connection(url.hostname, url.port)
                up_writer.write(head)  # absolute-form is valid for origin servers too
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
