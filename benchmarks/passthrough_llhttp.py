"""The issue's minimal pass-through on the proxy's own HTTP stack: what the record costs.

``python benchmarks/passthrough_llhttp.py UPSTREAM LOGFILE [--record-requests]`` prints
``listening on URL``. Same asyncio-protocol + httptools hops as ``contagent proxy``
(keep-alive upstream connections, chunks relayed as they arrive) but it appends only one
small JSON line per exchange: no request record before forwarding, no SHA-256, no parse
of either body. The gap between it and the proxy in one run is the price of the raw log.

``--record-requests`` adds the least that the recording contract demands and nothing else:
before forwarding, parse the request body (to know it is JSON and whether it streams)
and append it, verbatim, in one line. No index, headers, hash, outcome parsing, or fault
handling. Whatever this keeps of direct throughput bounds what any recorder on this
stack can keep. Plain HTTP upstream: a benchmark reference, not a tool.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop

DROP = {b"host", b"content-length", b"connection", b"transfer-encoding", b"keep-alive"}


class Upstream(asyncio.Protocol):
    def __init__(self, pool: list[Upstream]) -> None:
        self.pool, self.parser, self.client = pool, httptools.HttpResponseParser(self), None
        self.headers: list[tuple[bytes, bytes]] = []

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.client.head(self.parser.get_status_code(), self.headers)

    def on_body(self, body: bytes) -> None:
        self.client.body(body)

    def on_message_complete(self) -> None:
        client, self.client = self.client, None
        client.end()
        self.pool.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.pool:
            self.pool.remove(self)
        if self.client is not None:
            self.client.transport.close()


class Client(asyncio.Protocol):
    def __init__(
        self, up: tuple[str, int], pool: list[Upstream], fd: int, record_requests: bool
    ) -> None:
        self.up, self.pool, self.fd, self.record_requests = up, pool, fd, record_requests
        self.parser = httptools.HttpRequestParser(self)

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.url, self.headers, self.parts = b"", [], []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.parts)
        self.path = b"/" + self.url.split(b"/", 3)[3]
        head = [b"%s %s HTTP/1.1\r\nhost: up\r\n" % (self.parser.get_method(), self.path)]
        head += [n + b": " + v + b"\r\n" for n, v in self.headers if n.lower() not in DROP]
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        if self.record_requests:
            parsed = orjson.loads(body)
            line = {"t": time.time(), "path": self.path.decode(), "body": orjson.Fragment(body),
                    "stream": isinstance(parsed, dict) and parsed.get("stream") is True}  # fmt: skip
            os.write(self.fd, orjson.dumps(line) + b"\n")
        data = b"".join(head) + body
        if self.pool:
            up = self.pool.pop()
            up.client = self
            up.transport.write(data)
        else:
            asyncio.get_running_loop().create_task(self.connect(data))

    async def connect(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(lambda: Upstream(self.pool), *self.up)
        up.client = self
        up.transport.write(data)

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        out = [b"HTTP/1.1 %d OK\r\n" % status]
        out += [n + b": " + v + b"\r\n" for n, v in headers if n.lower() not in DROP]
        out.append(b"transfer-encoding: chunked\r\n\r\n")
        self.transport.write(b"".join(out))

    def body(self, data: bytes) -> None:
        self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def end(self) -> None:
        self.transport.write(b"0\r\n\r\n")
        line = {"t": time.time(), "path": self.path.decode(), "status": self.status}
        os.write(self.fd, orjson.dumps(line) + b"\n")


async def serve(upstream: str, log_path: str, record_requests: bool) -> None:
    parts = urlsplit(upstream)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pool: list[Upstream] = []
    loop = asyncio.get_running_loop()
    target = (parts.hostname or "127.0.0.1", parts.port or 80)
    server = await loop.create_server(
        lambda: Client(target, pool, fd, record_requests), "127.0.0.1", 0
    )
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


if __name__ == "__main__":
    uvloop.run(serve(sys.argv[1], sys.argv[2], "--record-requests" in sys.argv[3:]))
