"""HTTP/1.1 toward the agent: one asyncio protocol per client connection.

Requests are parsed by llhttp (``httptools``) and handed whole (the body is
needed for the request record before anything goes upstream) to the
:class:`RequestHandler`, one at a time per connection. A pipelined request
waits its turn, and the connection stops reading until then, as it does while
the client does not read what it is sent: a client cannot make the proxy
buffer without bound. Every other resource a client can hold is capped by
:class:`~contagent.proxy.http1.Limits`. A connection that closes while its
request is in flight tells the exchange at once (``client_gone``), which is
how the upstream request gets cancelled.

A refused request is answered, then the connection is closed with a linger:
writing is shut down (the client sees the answer, then the end) and what the
client still sends is read and dropped for a short while before the socket
closes. Closing with unread bytes would make the kernel send a reset, which
can destroy the answer before the client reads it (a client still sending an
oversized head would see a reset instead of its 431).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, cast

import httptools

from contagent.proxy.admission import client_api
from contagent.proxy.http1 import NO_BODY_STATUS, Limits, header_tokens, response_head
from contagent.proxy.request import Request, Responder
from contagent.wire import WireApi

log = logging.getLogger(__name__)

#: after a refusal, how long and how many bytes the client may still send before the close
LINGER_S = 2.0
LINGER_BYTES = 16 * 1024 * 1024


class RequestHandler(Protocol):
    stopping: bool

    def handle(self, conn: ClientConnection, request: Request) -> None: ...

    def admit(self, conn: ClientConnection) -> bool:
        """Count a new connection in; False: over the limit, refuse it."""
        ...

    def release(self, conn: ClientConnection) -> None:
        """Count a closed connection out."""
        ...


class _Stop(Exception):
    """Raised in a parser callback to stop parsing a connection that was refused."""


class ClientConnection(asyncio.Protocol):
    """One agent connection. The handler answers each request through :meth:`respond`
    or :meth:`start_response` / :meth:`send` / :meth:`end`, then the next one starts."""

    def __init__(self, handler: RequestHandler, limits: Limits) -> None:
        self.handler = handler
        self.limits = limits
        self.loop = asyncio.get_running_loop()
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
        self.reading = True
        self.write_paused = False
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._in_head = False
        self._head_size = 0  # bytes of the head's parsed target and fields
        self._head_read = 0  # bytes of the reads that began and ended inside the head
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_started = 0.0
        self._continue = False  # a 100 Continue is owed once this request's turn comes
        self._refused = False
        self._linger: asyncio.TimerHandle | None = None
        self._drained = 0  # bytes read and dropped while lingering

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        if not self.handler.admit(self):
            self._refuse(503, "contagent proxy is at its client connection limit", "proxy_error")

    def data_received(self, data: bytes) -> None:
        self.last_active = -1.0  # "recently": the idle sweep stamps the time itself
        if self._refused:
            self._drained += len(data)
            if self._linger is not None and self._drained > LINGER_BYTES:
                self.abort()
            return
        in_head = self._in_head
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # CONNECT or Upgrade: refused in on_headers_complete
            self._refuse(400, "protocol upgrades are not supported")
        except httptools.HttpParserCallbackError as exc:
            if not self._refused:  # not the client's fault: a bug of ours, say so loudly
                log.error("request handling failed", exc_info=exc.__context__ or exc)
                self._refuse(500, "contagent proxy failed to handle the request", "proxy_error")
        except httptools.HttpParserError as exc:
            if not self._refused:
                self._refuse(400, f"malformed HTTP request: {exc}")
        else:
            if in_head and self._in_head:  # a head trickling in: llhttp buffers its fields
                self._head_read += len(data)  # apart: these bytes may hold parsed fields too
                if self._head_read > self.limits.max_head:
                    self._refuse(431, f"request head over {self.limits.max_head} bytes")

    def eof_received(self) -> bool:
        return False  # a half-closed client is gone: close, and cancel what it asked for

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_head_timer()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self.handler.release(self)
        responder, self.responder = self.responder, None
        if responder is not None:
            responder.client_gone()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._pause_reading()
        if self.responder is not None:
            self.responder.pause_upstream()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.responder is not None:
            self.responder.resume_upstream()
        elif not self.busy:
            self._next()

    # -- httptools callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._body = []
        self._size = 0
        self._in_head = True
        self._head_size = self._head_read = 0
        if self.busy:  # pipelined: read no further until it is its turn
            self._pause_reading()
        self._head_started = now = self.loop.time()
        if self._head_timer is None:  # one timer per connection, re-armed lazily
            self._head_timer = self.loop.call_at(now + self.limits.head_timeout, self._head_timeout)

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self.limits.max_target:
            self._stop(414, f"request target over {self.limits.max_target} bytes")
        self._grow(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:  # trailer fields of a chunked body: never headers
            return
        self._headers.append((name, value))
        self._head_size += len(name) + len(value) + 4
        if len(self._headers) > self.limits.max_headers:
            self._stop(431, f"more than {self.limits.max_headers} header fields")
        if self._head_size > self.limits.max_head:
            self._stop(431, f"request head over {self.limits.max_head} bytes")

    def _grow(self, n: int) -> None:
        self._head_size += n
        if self._head_size > self.limits.max_head:
            self._stop(431, f"request head over {self.limits.max_head} bytes")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_size = 0
        parser = self.parser
        if parser.get_method() == b"CONNECT":
            self._stop(405, "CONNECT is not supported: this is not a forward proxy")
        if parser.should_upgrade():
            self._stop(400, "protocol upgrades are not supported")
        expect = False
        for name, value in self._headers:  # one pass: this runs for every request
            low = name.lower()
            if low == b"transfer-encoding":
                if header_tokens((value,)) - {b"chunked"}:
                    self._stop(501, "only the chunked transfer coding is supported")
            elif low == b"expect" and value.strip().lower() == b"100-continue":
                expect = True
        if not expect or parser.get_http_version() == "1.0":
            return  # HTTP/1.0 has no 100 Continue (RFC 9110 10.1.1)
        if self.busy:
            self._continue = True  # sent when the request ahead is answered
        elif self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._continue = False  # the client did not wait for it
        self._size += len(body)
        if self._size > self.limits.max_body:
            self._stop(413, f"request body over {self.limits.max_body} bytes")
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
        self._continue = False
        self._in_head = False
        self.queue.append(request)
        if self.busy or self.write_paused:
            self._pause_reading()  # pipelined: read no further until it is its turn
        else:
            self._next()

    # -- limits -------------------------------------------------------------------------

    def _stop(self, status: int, message: str) -> None:
        self._refuse(status, message)
        raise _Stop(message)

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self._in_head or self.closed:
            return
        now = self.loop.time()
        if not self.reading:  # not the client's fault: the proxy stopped reading it
            self._head_started = now
        due = self._head_started + self.limits.head_timeout
        if now < due:
            self._head_timer = self.loop.call_at(due, self._head_timeout)
            return
        self._refuse(408, f"request head not received within {self.limits.head_timeout:g} s")

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _pause_reading(self) -> None:
        if self.reading and self.transport is not None and not self.closed:
            self.reading = False
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if not self.reading and self.transport is not None and not self.closed:
            self.reading = True
            self.transport.resume_reading()

    # -- answering --------------------------------------------------------------------

    def _next(self) -> None:
        """Start the next queued request, or read on; never while the client does not read."""
        if self.busy or self.write_paused or self.closed:
            return
        if self.queue:
            self._start(self.queue.pop(0))
            return
        if self._continue and self.transport is not None:
            self._continue = False
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if not self._refused:
            self._resume_reading()

    def _start(self, request: Request) -> None:
        self.busy = True
        self.keep_alive = request.keep_alive
        self.chunked = request.http11
        self.handler.handle(self, request)

    def _refuse(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        """Answer a request we cannot or will not parse, then close: the stream is out of step."""
        self._refused = True
        self._in_head = False
        self._cancel_head_timer()
        self.queue.clear()
        self.keep_alive = False  # a response in flight closes the connection when it ends
        if not self.busy:
            self.busy = True  # nothing else may start on this connection
            # the shape of the API whose route the target names, when its head got that far
            self.respond_error(status, message, kind, client_api(self._url))

    def _head(self, status: int, headers: list[tuple[bytes, bytes]], framing: bytes) -> bytes:
        if self.handler.stopping:
            self.keep_alive = False
        return response_head(status, headers, framing, not self.keep_alive)

    def respond(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        head_only: bool = False,
    ) -> None:
        """Send a whole response and finish the request. ``head_only``: the answer to a
        HEAD, whose headers (``Content-Length`` among them) go as given, without a body."""
        if self.transport is not None and not self.closed:
            if head_only:
                self.transport.write(self._head(status, headers, b""))
            else:
                framing = b"" if status in NO_BODY_STATUS else b"Content-Length: %d\r\n" % len(body)
                self.transport.write(self._head(status, headers, framing) + body)
        self._finished()

    def respond_error(self, status: int, message: str, kind: str, api: WireApi) -> None:
        """Answer an error the proxy itself makes, in the shape of ``api``, the client's wire
        API (:func:`contagent.proxy.admission.client_api`)."""
        body = api.error_body(status, message, kind)
        self.respond(status, [(b"Content-Type", b"application/json")], body)

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
        if self._refused and not self.handler.stopping:
            self._close_lingering()
        elif not self.keep_alive or self.handler.stopping:
            self.transport.close()
        else:
            self._next()

    def _close_lingering(self) -> None:
        """Shut down writing, drop what the client still sends, close after ``LINGER_S``
        (or at once when it closes its side, or past ``LINGER_BYTES``)."""
        transport = self.transport
        if transport is None or self._linger is not None:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._linger = self.loop.call_later(LINGER_S, self.abort)
        self._resume_reading()  # a paused read too: the point is to drain

    def close_if_idle(self) -> None:
        if not self.busy and self.transport is not None:
            self.transport.close()

    def idle_for(self, now: float) -> float:
        """Seconds without a request in flight or a byte received, as of the sweeps."""
        if self.busy or self.last_active < 0:
            self.last_active = now
        return now - self.last_active
