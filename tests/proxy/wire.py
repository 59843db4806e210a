"""Protocol-level test harness, in uvicorn's style: feed bytes to a protocol object, read
what it writes to a fake transport. No sockets, no threads: each rule is seen at the wire."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any

from contagent.proxy.downstream import ClientConnection
from contagent.proxy.http1 import Limits
from contagent.proxy.request import Request


class FakeTransport:
    """Records writes and flow-control calls like an asyncio transport would receive them."""

    def __init__(self, protocol: asyncio.Protocol | None = None) -> None:
        self.protocol = protocol
        self.written = bytearray()
        self.closed = False
        self.aborted = False
        self.eof = False  # write_eof() was called: nothing more may be written
        self.reading = True
        self.pauses = 0

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        assert not self.eof, "write after write_eof"
        self.written += data

    @property
    def ended(self) -> bool:
        """The proxy is done writing: it shut down writing, or closed."""
        return self.eof or self.closed

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def take(self) -> bytes:
        out = bytes(self.written)
        self.written.clear()
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.protocol is not None:
                self.protocol.connection_lost(None)

    def abort(self) -> None:
        self.aborted = True
        self.close()

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else default

    def set_protocol(self, protocol: asyncio.Protocol) -> None:
        self.protocol = protocol


class FakeHandler:
    """Stands in for the proxy: keeps the requests it is handed, answers when told."""

    def __init__(self, max_clients: int = 100) -> None:
        self.stopping = False
        self.requests: list[Request] = []
        self.conns: set[ClientConnection] = set()
        self.max_clients = max_clients

    def handle(self, conn: ClientConnection, request: Request) -> None:
        self.requests.append(request)

    def admit(self, conn: ClientConnection) -> bool:
        if len(self.conns) >= self.max_clients:
            return False
        self.conns.add(conn)
        return True

    def release(self, conn: ClientConnection) -> None:
        self.conns.discard(conn)


class _Timer:
    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """The connection's clock and timers, moved only by :meth:`advance`.

    A timing rule tested against the real clock fails when a loaded machine wakes the test
    late; on this clock every deadline falls exactly where the test puts it."""

    def __init__(self) -> None:
        self.now = 0.0
        self._due: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object]) -> _Timer:
        timer = _Timer(callback)
        heapq.heappush(self._due, (when, next(self._order), timer))
        return timer

    def call_later(self, delay: float, callback: Callable[[], object]) -> _Timer:
        return self.call_at(self.now + delay, callback)

    def advance(self, seconds: float) -> None:
        """Move the clock on, running each timer that falls due, at its own time."""
        end = self.now + seconds
        while self._due and self._due[0][0] <= end:
            when, _, timer = heapq.heappop(self._due)
            self.now = max(self.now, when)
            if not timer.cancelled:
                timer.callback()
        self.now = end


def client_conn(
    handler: FakeHandler | None = None, clock: ManualClock | None = None, **limits: Any
) -> tuple[ClientConnection, FakeTransport, FakeHandler]:
    """A client connection on a fake transport; call from a running event loop. With
    ``clock``, its timers run on that clock instead of the loop's."""
    handler = handler or FakeHandler()
    conn = ClientConnection(handler, Limits(**limits))
    if clock is not None:
        conn.loop = clock  # type: ignore[assignment]
    transport = FakeTransport(conn)
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport, handler


def status_of(written: bytes) -> int:
    """The status code of the first response in ``written`` (0 when nothing was written)."""
    if not written:
        return 0
    return int(written.split(b" ", 2)[1])


def post(path: bytes = b"/r/r1/v1/chat/completions", body: bytes = b"{}", extra: bytes = b"",
         version: bytes = b"1.1") -> bytes:  # fmt: skip
    return (
        b"POST %s HTTP/%s\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n%s\r\n%s" % (path, version, len(body), extra, body)
    )


def on_loop(fn: Any) -> Any:
    """Run an ``async def`` test on a fresh event loop (the protocols need a running one)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        return asyncio.run(fn(*args, **kw))

    return wrapper


class FakeHost:
    """Stands in for the proxy an exchange reports to: keeps the outcome records."""

    def __init__(self) -> None:
        self.stopping = False
        self.records: list[dict[str, Any]] = []
        self.over_calls = 0

    def finish(self, record: dict[str, Any], ended_version: int | None = None) -> bool:
        self.records.append(record)
        return True

    def over(self, ex: Any) -> None:
        self.over_calls += 1

    def cancel_waiting(self, ex: Any) -> None:
        pass


class Relay:
    """One exchange at the wire: a client connection and an upstream connection, both on
    fake transports; feed the upstream's bytes, read what the client was sent."""

    def __init__(self, head_only: bool = False, read_timeout: float | None = None) -> None:
        from contagent.proxy.exchange import Exchange
        from contagent.proxy.pool import UpstreamPool
        from contagent.proxy.upstream import UpstreamConnection

        self.client, self.client_t, _ = client_conn()
        self.client.busy = True  # as if its request had been handed over
        self.client.chunked = True
        self.host = FakeHost()
        self.pool = UpstreamPool(
            "http://127.0.0.1:9", connect_timeout=None, read_timeout=read_timeout, limit=4
        )
        self.ex = Exchange(self.host, self.client, "r1", 0, head_only=head_only)  # type: ignore[arg-type]
        self.client.responder = self.ex
        self.up = UpstreamConnection(self.pool)
        self.up_t = FakeTransport(self.up)
        self.up.connection_made(self.up_t)  # type: ignore[arg-type]
        self.up.send(self.ex, b"GET / HTTP/1.1\r\n\r\n")
        self.up_t.take()

    def feed(self, data: bytes) -> None:
        self.up.data_received(data)

    def outcome(self) -> dict[str, Any]:
        (record,) = self.host.records
        return record

    def sent(self) -> tuple[bytes, bytes]:
        """The head and the (de-chunked, when chunked) body the client was sent."""
        head, _, body = self.client_t.take().partition(b"\r\n\r\n")
        if b"transfer-encoding: chunked" in head.lower():
            from tests.proxy.helpers import dechunk

            body = dechunk(body)
        return head, body
