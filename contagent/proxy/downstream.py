"""HTTP/1.1 toward the agent: one asyncio protocol per client connection.

Requests are parsed by llhttp (``httptools``) and handed whole (the body is
needed for the request record before anything goes upstream) to the
:class:`RequestHandler`, one at a time per connection; pipelined requests
wait their turn. A connection that closes while its request is in flight
tells the exchange at once (``client_gone``), which is how the upstream
request gets cancelled.
"""

from __future__ import annotations

import asyncio
import http
import logging
from typing import Protocol, cast

import httptools
import orjson

log = logging.getLogger(__name__)

_PHRASES = {s.value: s.phrase.encode() for s in http.HTTPStatus}
_NO_BODY = frozenset({204, 304})


def error_body(status: int, message: str, kind: str = "upstream_error") -> bytes:
    """An OpenAI-style error body."""
    return orjson.dumps({"error": {"message": message, "type": kind, "code": status}})


class Request:
    """One parsed request, as received."""

    __slots__ = ("body", "headers", "http11", "keep_alive", "method", "target")

    def __init__(
        self,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
        http11: bool,
    ) -> None:
        self.http11 = http11
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


class Responder(Protocol):
    """What a connection tells the exchange answering its current request."""

    def client_gone(self) -> None: ...
    def pause_upstream(self) -> None: ...
    def resume_upstream(self) -> None: ...


class RequestHandler(Protocol):
    stopping: bool

    def handle(self, conn: ClientConnection, request: Request) -> None: ...
    def track(self, conn: ClientConnection, open_: bool) -> None: ...


class ClientConnection(asyncio.Protocol):
    """One agent connection. The handler answers each request through :meth:`respond`
    or :meth:`start_response` / :meth:`send` / :meth:`end`, then the next one starts."""

    def __init__(self, handler: RequestHandler, max_body: int) -> None:
        self.handler = handler
        self.max_body = max_body
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.responder: Responder | None = None
        self.busy = False
        self.last_active = -1.0
        self.closed = False
        self.keep_alive = True
        self.chunked = False
        self.queue: list[Request] = []
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._refused = False

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self.handler.track(self, True)

    def data_received(self, data: bytes) -> None:
        self.last_active = -1.0  # "recently": the idle sweep stamps the time itself
        if self._refused:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported")
        except httptools.HttpParserCallbackError as exc:
            if not self._refused:  # not the client's fault: a bug of ours, say so loudly
                log.error("request handling failed", exc_info=exc.__context__ or exc)
                self._refuse(500, "contagent proxy failed to handle the request", "proxy_error")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}")

    def eof_received(self) -> bool:
        return False  # a half-closed client is gone: close, and cancel what it asked for

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.handler.track(self, False)
        responder, self.responder = self.responder, None
        if responder is not None:
            responder.client_gone()

    def pause_writing(self) -> None:
        if self.responder is not None:
            self.responder.pause_upstream()

    def resume_writing(self) -> None:
        if self.responder is not None:
            self.responder.resume_upstream()

    # -- httptools callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._body = []
        self._size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        for name, value in self._headers:
            if name.lower() == b"expect" and value.strip().lower() == b"100-continue":
                if not self.busy and self.transport is not None:
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self.max_body:
            self._refuse(413, f"request body over {self.max_body} bytes")
            raise httptools.HttpParserError("body too large")  # stop parsing this connection
        self._body.append(body)

    def on_message_complete(self) -> None:
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(
            self.parser.get_method().decode("ascii", "replace"),
            self._url,
            self._headers,
            body,
            self.parser.should_keep_alive(),
            self.parser.get_http_version() != "1.0",
        )
        self._body = []
        if self.busy:
            self.queue.append(request)
        else:
            self._start(request)

    # -- answering --------------------------------------------------------------------

    def _start(self, request: Request) -> None:
        self.busy = True
        self.keep_alive = request.keep_alive
        self.chunked = request.http11
        self.handler.handle(self, request)

    def _refuse(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        """Answer a request we cannot parse, then close: the stream is out of step."""
        self._refused = True
        self.queue.clear()
        self.keep_alive = False  # a response in flight closes the connection when it ends
        if not self.busy:
            self.respond(status, [(b"Content-Type", b"application/json")],
                         error_body(status, message, kind))  # fmt: skip

    def _head(self, status: int, headers: list[tuple[bytes, bytes]], framing: bytes) -> bytes:
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, _PHRASES.get(status, b"Unknown"))]
        for name, value in headers:
            parts.append(name + b": " + value + b"\r\n")
        parts.append(framing)
        if not self.keep_alive or self.handler.stopping:
            self.keep_alive = False
            parts.append(b"Connection: close\r\n")
        parts.append(b"\r\n")
        return b"".join(parts)

    def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """Send a whole response and finish the request."""
        if self.transport is not None and not self.closed:
            framing = b"" if status in _NO_BODY else b"Content-Length: %d\r\n" % len(body)
            self.transport.write(self._head(status, headers, framing) + body)
        self._finished()

    def respond_error(self, status: int, message: str, kind: str = "upstream_error") -> None:
        self.respond(
            status, [(b"Content-Type", b"application/json")], error_body(status, message, kind)
        )

    def start_response(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """Send the head of a response whose body follows piece by piece."""
        if not self.chunked:
            self.keep_alive = False  # HTTP/1.0: the end of the connection ends the body
        framing = b"Transfer-Encoding: chunked\r\n" if self.chunked else b""
        if self.transport is not None and not self.closed:
            self.transport.write(self._head(status, headers, framing))

    def send(self, data: bytes) -> None:
        if data and self.transport is not None and not self.closed:
            if self.chunked:
                self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
            else:
                self.transport.write(data)

    def end(self) -> None:
        """End a response begun with :meth:`start_response` and finish the request."""
        if self.chunked and self.transport is not None and not self.closed:
            self.transport.write(b"0\r\n\r\n")
        self._finished()

    def abort(self) -> None:
        """Cut the connection without a proper end (the client must not see a clean finish)."""
        self.responder = None
        if self.transport is not None:
            self.transport.abort()

    def _finished(self) -> None:
        self.responder = None
        self.busy = False
        self.last_active = -1.0
        if self.closed or self.transport is None:
            return
        if not self.keep_alive or self.handler.stopping:
            self.transport.close()
        elif self.queue:
            self._start(self.queue.pop(0))

    def close_if_idle(self) -> None:
        if not self.busy and self.transport is not None:
            self.transport.close()

    def idle_for(self, now: float) -> float:
        """Seconds without a request in flight or a byte received, as of the sweeps."""
        if self.busy or self.last_active < 0:
            self.last_active = now
        return now - self.last_active
