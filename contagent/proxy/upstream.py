"""HTTP/1.1 to the upstream: a pool of keep-alive connections on asyncio protocols.

The proxy's hot path is two HTTP hops per exchange on a machine whose cores it
shares with the agent and the model server, so both hops are asyncio protocols
with the llhttp parser (``httptools``) and no per-request task or stream
objects: a full client stack here cost about five times the CPU per exchange
(benchmarks/proxy_bench.py).

A connection carries one request at a time and reports to its
:class:`UpstreamSink` (the exchange): ``on_head`` once, ``on_body`` per piece
of the decoded body as it arrives, then exactly one of ``on_end`` or
``on_fail``. One case is sent again, once, as HTTP clients do: a reused
keep-alive connection that the server closes before any byte of the answer
(the server timed the idle connection out as the request went down it). The
sink never sees the first attempt.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import zlib
from pathlib import Path
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools

from contagent.errors import ContagentError
from contagent.proxy.http1 import NO_BODY_STATUS, BodyDecoder, body_decoder, tokens
from contagent.proxy.tunnel import open_tunnel, outbound_proxy

log = logging.getLogger(__name__)

#: keep-alive connections idle (nothing read) longer than this are closed, not reused, so a
#: request is not sent down a connection the server is closing (uvicorn: 5 s)
IDLE_REUSE_S = 4.0


class UpstreamSink(Protocol):
    #: set by the connection that carries the request
    upstream: UpstreamConnection | None
    #: true once nobody waits for the answer any more
    gone: bool
    #: the request was a HEAD: the answer has headers only, whatever they announce
    head_only: bool

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...
    def on_body(self, data: bytes) -> None: ...
    def on_end(self) -> None: ...
    def on_fail(self, message: str, timed_out: bool) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    """One connection to the upstream server; one request at a time."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.sink: UpstreamSink | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.got_head = False
        self.until_close = False
        self.decoder: BodyDecoder | None = None
        self.interim = False  # parsing a 1xx response, which is skipped
        self.pending: list[bytes] = []
        self.paused = False
        self.last_read = 0.0
        self.timer: asyncio.TimerHandle | None = None
        #: the request in flight, kept until its answer's first byte for one resend
        self.request = b""
        self.resendable = False
        self.used = False  # a request went down it before

    # -- driven by the pool and the exchange -----------------------------------------

    def send(self, sink: UpstreamSink, data: bytes) -> None:
        """Send ``data`` for ``sink``. On a connection that carried a request before, the
        server may be closing it as this one goes down: a close before any byte of the
        answer then has the pool send the request again on a new connection."""
        assert self.transport is not None
        self.sink = sink
        sink.upstream = self
        self.got_head = self.until_close = False
        self.resendable = self.used
        self.request = data if self.used else b""
        self.used = True
        self.last_read = self.loop.time()
        timeout = self.pool.read_timeout
        if timeout is not None:
            self.timer = self.loop.call_at(self.last_read + timeout, self._check_timeout)
        self.transport.write(data)

    def abort(self) -> None:
        """Drop the request at once (the upstream server sees the connection close)."""
        self.sink = None
        self.request = b""
        self.pending.clear()
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing() and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing() and self.paused:
            self.paused = False
            self.last_read = self.loop.time()  # the upstream's silence counts from here
            self.transport.resume_reading()

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.last_read = self.loop.time()  # also when the connection goes idle unused

    def data_received(self, data: bytes) -> None:
        self.last_read = self.loop.time()
        if self.sink is None:  # bytes nobody asked for: this connection is not reusable
            self._discard()
            return
        if self.resendable:  # the server answers: whatever happens now is this request's
            self.resendable = False
            self.request = b""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # a bug of ours: loud, and a fault
            log.error("relaying the upstream response failed", exc_info=exc.__context__ or exc)
            self._fail(f"contagent proxy failed relaying the response: {exc.__context__!r}", False)
            return
        except httptools.HttpParserError as exc:
            self._fail(f"upstream sent malformed HTTP: {exc}", False)
            return
        self._deliver()

    def _deliver(self) -> None:
        # one piece per read, not per chunk: a read often holds many small SSE chunks,
        # and each piece costs the client connection a write
        pending = self.pending
        if pending and self.sink is not None:
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            pending.clear()
            self.sink.on_body(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.pool.forget(self)
        if self.sink is None:
            return
        if self.until_close and exc is None:  # a body delimited by the end of the connection
            self._finish(reuse=False)
            return
        if self.resendable:
            self._resend(exc)
            return
        why = f": {exc}" if exc is not None else ""
        started = self.got_head
        self._fail(
            f"upstream stream broke: connection lost{why}"
            if started
            else f"upstream unreachable: connection closed before a response{why}",
            False,
        )

    # -- httptools callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self.headers = []
        self.decoder = None
        self.interim = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        sink = self.sink
        if sink is None:
            return
        status = self.parser.get_status_code()
        if status == 101:
            self._fail("upstream switched protocols, which the proxy does not relay", False)
            return
        if status < 200:  # 100 Continue, 103 Early Hints: interim, the final answer follows
            self.interim = True
            return
        headers = self.headers
        framed = encoded = False
        for name, value in headers:  # one pass: this runs for every answer
            low = name.lower()
            if low == b"transfer-encoding":
                if tokens((value,)) != {b"chunked"}:
                    self._fail("upstream used a transfer coding other than chunked", False)
                    return
                framed = True
            elif low == b"content-length":
                framed = True
            elif low == b"content-encoding":
                encoded = True
        no_body = sink.head_only or status in NO_BODY_STATUS
        decoder = body_decoder(headers) if encoded and not no_body else None
        if decoder:  # asked for identity; decoded anyway so record and client get plain bytes
            self.decoder = decoder
            headers = [(n, v) for n, v in headers if n.lower() != b"content-encoding"]
        self.until_close = not framed and not no_body
        self.got_head = True
        sink.on_head(status, headers)
        if no_body and self.sink is sink:
            self._finish(reuse=False)  # the parser would wait for a body that never comes

    def on_body(self, data: bytes) -> None:
        if self.sink is not None:
            if self.decoder is not None:
                try:
                    data = self.decoder.decode(data)
                except zlib.error as exc:
                    self._fail(f"upstream stream broke: bad content encoding: {exc}", False)
                    return
            self.pending.append(data)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
        elif self.sink is not None:
            self._finish(reuse=self.parser.should_keep_alive())

    # -- endings ----------------------------------------------------------------------

    def _finish(self, reuse: bool) -> None:
        if self.decoder is not None and self.sink is not None:
            broken = self.decoder.finish()
            if broken is not None:
                self._fail(f"upstream stream broke: {broken}", False)
                return
        self._deliver()
        sink, self.sink = self.sink, None
        self.request = b""
        if sink is None:  # the exchange dropped (aborted) this connection on the last piece
            return
        sink.upstream = None  # its client's back-pressure must not reach the next request
        self.resume_reading()
        self._cancel_timer()
        if reuse:
            self.pool.release(self)
        else:
            self._discard()
        sink.on_end()

    def _resend(self, exc: Exception | None) -> None:
        sink, data = self.sink, self.request
        assert sink is not None
        self.sink, self.request, self.resendable = None, b"", False
        sink.upstream = None
        self._cancel_timer()
        log.info("upstream closed a reused connection before answering%s: sending again",
                 f" ({exc})" if exc is not None else "")  # fmt: skip
        self.pool.resend(sink, data)

    def _fail(self, message: str, timed_out: bool) -> None:
        self._deliver()  # what arrived before the fault still reaches client and record
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.upstream = None
        self._cancel_timer()
        self._discard(abort=True)
        if sink is not None:
            sink.on_fail(message, timed_out)

    def _discard(self, abort: bool = False) -> None:
        self.pool.forget(self)
        if self.transport is not None and not self.transport.is_closing():
            if abort:
                self.transport.abort()
            else:
                self.transport.close()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _check_timeout(self) -> None:
        # one timer per request, re-armed lazily: cheaper than resetting it on every read
        self.timer = None
        timeout = self.pool.read_timeout
        if self.sink is None or timeout is None:
            return
        due = self.last_read + timeout
        if self.paused:  # the client is slow, not the upstream: the silence is ours
            due = self.loop.time() + timeout
        elif self.loop.time() >= due:
            self._fail(
                "upstream timed out mid-stream" if self.got_head else "upstream timed out", True
            )
            return
        self.timer = self.loop.call_at(due, self._check_timeout)


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verified TLS to the upstream: the system's trust store, or only the CAs in ``ca_file``."""
    try:
        return ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))
    except (ssl.SSLError, ValueError) as exc:  # not PEM, or no certificate in it
        reason = getattr(exc, "reason", None) or exc
        raise ContagentError(
            f"upstream CA {ca_file}: not a PEM CA certificate ({reason})"
        ) from None
    except OSError as exc:
        raise ContagentError(f"upstream CA {ca_file}: {exc.strerror or exc}") from None


class UpstreamPool:
    """Keep-alive connections to one upstream origin, at most ``limit`` open at once."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float | None,
        read_timeout: float | None,
        limit: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.hostname is None:
            raise ContagentError(f"upstream {base_url!r} has no host")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        default_port = self.port == (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = (host if default_port else f"{host}:{self.port}").encode("idna")
        self.base_path = parts.path.rstrip("/").encode()
        self.via = outbound_proxy(parts.scheme, self.host)
        plain_via = None if self.tls else self.via
        #: what a request head adds for a plain outbound proxy: absolute-form targets, its auth
        self.target_prefix = b"http://" + self.host_header if plain_via else b""
        self.proxy_auth = plain_via.auth_line if plain_via else b""
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.limit = max(1, limit)
        self.loop = asyncio.get_running_loop()
        self._ssl = (tls or tls_context(None)) if self.tls else None
        self._idle: collections.deque[UpstreamConnection] = collections.deque()
        self._open: set[UpstreamConnection] = set()
        self._connecting = 0
        self._waiting: collections.deque[tuple[UpstreamSink, bytes]] = collections.deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    def send(self, sink: UpstreamSink, data: bytes) -> None:
        """Send one request (head and body, already framed) for ``sink``."""
        now = self.loop.time()
        while self._idle:
            conn = self._idle.pop()  # most recently used first: warmest, least likely stale
            transport = conn.transport
            if transport is None or transport.is_closing() or now - conn.last_read > IDLE_REUSE_S:
                conn._discard()
                continue
            conn.send(sink, data)
            return
        if len(self._open) + self._connecting >= self.limit:
            self._waiting.append((sink, data))
            return
        self._start_connect(sink, data)

    def resend(self, sink: UpstreamSink, data: bytes) -> None:
        """Send again, on a new connection, a request a reused one lost before its answer;
        the lost connection's place is free, so this never waits behind the queue."""
        if self.closed:
            sink.on_fail("upstream unreachable: connection closed before a response", False)
            return
        self._start_connect(sink, data)

    def _start_connect(self, sink: UpstreamSink, data: bytes) -> None:
        self._connecting += 1
        task = self.loop.create_task(self._connect(sink, data))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self, sink: UpstreamSink) -> None:
        """Forget a request that has not got a connection yet."""
        self._waiting = collections.deque(w for w in self._waiting if w[0] is not sink)

    async def _connect(self, sink: UpstreamSink, data: bytes) -> None:
        try:
            try:
                conn = await asyncio.wait_for(self._open_connection(), self.connect_timeout)
            finally:
                self._connecting -= 1
        except TimeoutError:
            sink.on_fail("upstream timed out", True)
            self._next_waiting()
            return
        except (OSError, ssl.SSLError) as exc:
            sink.on_fail(f"upstream unreachable: {exc.strerror or exc}", False)
            self._next_waiting()
            return
        if sink.gone or self.closed:  # the client left while we connected
            self.release(conn)
            return
        self._open.add(conn)
        conn.send(sink, data)

    async def _open_connection(self) -> UpstreamConnection:
        via = self.via
        if via is None or not self.tls:
            host, port = (self.host, self.port) if via is None else (via.host, via.port)
            _, conn = await self.loop.create_connection(
                lambda: UpstreamConnection(self), host, port, ssl=self._ssl
            )
            return conn
        assert self._ssl is not None
        transport = await open_tunnel(via, self.host, self.port, self._ssl)
        conn = UpstreamConnection(self)
        transport.set_protocol(conn)
        conn.connection_made(transport)
        return conn

    def release(self, conn: UpstreamConnection) -> None:
        self._open.add(conn)
        if self._waiting:
            sink, data = self._waiting.popleft()
            conn.send(sink, data)
            return
        if self.closed:
            conn._discard()
            return
        self._idle.append(conn)

    def forget(self, conn: UpstreamConnection) -> None:
        self._open.discard(conn)
        try:
            self._idle.remove(conn)
        except ValueError:
            pass
        if self._waiting:  # later: forget() runs inside send() and the parser's callbacks
            self.loop.call_soon(self._next_waiting)

    def _next_waiting(self) -> None:
        if self._waiting and not self.closed and len(self._open) + self._connecting < self.limit:
            self.send(*self._waiting.popleft())

    def close(self) -> None:
        self.closed = True
        for conn in list(self._open) + list(self._idle):
            conn._discard(abort=conn.sink is not None)
        self._idle.clear()
        self._open.clear()
        for task in self._tasks:
            task.cancel()
