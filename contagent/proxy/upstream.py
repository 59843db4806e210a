"""HTTP/1.1 to the upstream: one keep-alive connection, an asyncio protocol.

The proxy's hot path is two HTTP hops per exchange on a machine whose cores it
shares with the agent and the model server, so both hops are asyncio protocols
with the llhttp parser (``httptools``) and no per-request task or stream
objects: a full client stack here cost about five times the CPU per exchange
(benchmarks/proxy_bench.py).

A connection carries one request at a time and reports to its
:class:`UpstreamSink` (the exchange): ``on_head`` once, ``on_body`` per piece
of the decoded body as it arrives, then exactly one of ``on_end`` or
``on_fail``. One case is sent again, once: a reused keep-alive connection that
the server closes before any byte of the answer (the server timed the idle
connection out as the request went down it, and never read it). The sink
never sees the first attempt.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import zlib
from pathlib import Path
from typing import Protocol, cast

import httptools

from contagent.errors import ContagentError
from contagent.proxy.http1 import NO_BODY_STATUS, BodyDecoder, body_decoder, header_tokens

log = logging.getLogger(__name__)


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


class ConnectionPool(Protocol):
    """What a connection needs from the pool that opened it (:mod:`~contagent.proxy.pool`)."""

    loop: asyncio.AbstractEventLoop
    #: seconds of upstream silence before a request fails; None waits forever
    read_timeout: float | None

    def release(self, conn: UpstreamConnection) -> None:
        """Take back a connection that may carry the next request."""
        ...

    def forget(self, conn: UpstreamConnection) -> None:
        """Drop a connection that is closing."""
        ...

    def resend(self, sink: UpstreamSink, data: bytes) -> None:
        """Send a request again on a new connection."""
        ...


class UpstreamConnection(asyncio.Protocol):
    """One connection to the upstream server; one request at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
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
                if header_tokens((value,)) != {b"chunked"}:
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
