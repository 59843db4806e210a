"""Keep-alive connections to the upstream origin (:mod:`~contagent.proxy.upstream`), at most
a given number open at once; requests beyond it wait for a free one."""

from __future__ import annotations

import asyncio
import collections
import ssl
from urllib.parse import urlsplit

from contagent.errors import ContagentError
from contagent.proxy.tunnel import open_tunnel, outbound_proxy
from contagent.proxy.upstream import UpstreamConnection, UpstreamSink, tls_context

#: keep-alive connections idle (nothing read) longer than this are closed, not reused, so a
#: request is not sent down a connection the server is closing (uvicorn: 5 s)
IDLE_REUSE_S = 4.0


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
