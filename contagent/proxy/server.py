"""The recording proxy: ``/r/<rollout_id>/<path>`` is forwarded to ``UPSTREAM/<path>``.

Per exchange, in this order: the request record is appended (index assigned
in the same synchronous step), the request goes upstream, the response goes
to the client (streams chunk by chunk as they arrive), and the outcome record
is appended before the client can see the end of the exchange
(:mod:`contagent.proxy.exchange`).

The proxy never retries. A client that goes away cancels its handler
(``handler_cancellation``), which closes the upstream connection at once so
the server stops generating.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

import aiohttp
import orjson
from aiohttp import web

from contagent.errors import ContagentError
from contagent.layout import safe_segment
from contagent.proxy.exchange import HOP_BY_HOP, Exchange, json_error
from contagent.proxy.recorder import Recorder, RecordError, request_record
from contagent.records import SAFE_HEADERS

log = logging.getLogger(__name__)

#: never forwarded: hop-by-hop, recomputed by aiohttp, or the client's credentials
_DROP_REQUEST = HOP_BY_HOP | {
    "host",
    "content-length",
    "authorization",
    "api-key",
    "x-api-key",
    "accept-encoding",
}
_USAGE_ROUTES = ("/chat/completions", "/completions")


def _hop_tokens(headers: Any) -> frozenset[str]:
    conn = headers.get("Connection")
    if not conn:
        return frozenset()
    return frozenset(t.strip().lower() for t in conn.split(","))


def _client_in(remote: str | None, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote) in network
    except ValueError:
        return False


class ProxyOptions(TypedDict, total=False):
    """The keyword options of :class:`RecordingProxy`, for functions that pass them on."""

    host: str
    port: int
    upstream_api_key: str | None
    upstream_timeout: float | None
    max_connections: int
    stop_grace: float
    only_rollout: str | None
    allowed_clients: str | None


class RecordingProxy:
    """An aiohttp server that forwards to ``upstream`` and records every exchange.

    Use from async code::

        proxy = RecordingProxy("http://127.0.0.1:8000", Path("records"))
        await proxy.start()
        client_base_url = proxy.rollout_base_url("rollout-1")  # .../r/rollout-1/v1
        ...
        await proxy.stop()   # finishes the records of requests in flight

    ``upstream_api_key`` replaces the client's credentials on the way up;
    ``upstream_timeout`` (s) bounds connecting and each wait for upstream bytes
    (504 before the response started, an error event after); None waits forever.
    ``stop_grace`` (s) is how long :meth:`stop` lets in-flight exchanges finish
    before cutting them (recorded as ``upstream_error``).

    ``only_rollout`` pins the proxy to one rollout id and ``allowed_clients``
    (a CIDR such as a Docker network's subnet) to the clients it serves: the
    runner gives each rollout its own proxy, and a container of one rollout
    must not be able to write into another rollout's log. Other requests get
    403 and are neither forwarded nor recorded.
    """

    def __init__(
        self,
        upstream: str,
        record_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream_api_key: str | None = None,
        upstream_timeout: float | None = None,
        max_connections: int = 1024,
        stop_grace: float = 30.0,
        only_rollout: str | None = None,
        allowed_clients: str | None = None,
    ) -> None:
        base = upstream.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ContagentError(f"upstream {upstream!r} is not an http(s) URL")
        if base.endswith("/v1"):  # the client adds /v1 itself: accept either spelling
            base = base[:-3]
        self.upstream = base
        self._only_rollout = (
            None if only_rollout is None else safe_segment(only_rollout, "rollout id")
        )
        try:
            self._clients = (
                None if allowed_clients is None else ipaddress.ip_network(allowed_clients)
            )
        except ValueError as exc:
            raise ContagentError(f"allowed clients {allowed_clients!r}: {exc}") from None
        self.record_dir = Path(record_dir)
        self.host = host
        self.port = port
        self._auth = f"Bearer {upstream_api_key}" if upstream_api_key else None
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=upstream_timeout, sock_read=upstream_timeout
        )
        self._max_connections = max_connections
        self._stop_grace = stop_grace
        self.recorder = Recorder(self.record_dir)
        self.counts: Counter[str] = Counter()
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.ServerRunner | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._stopping = False

    @property
    def url(self) -> str:
        """Base URL the proxy listens on, e.g. ``http://127.0.0.1:8123``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def rollout_base_url(self, rollout_id: str) -> str:
        """The OpenAI ``base_url`` an agent of ``rollout_id`` should use."""
        return f"{self.url}/r/{safe_segment(rollout_id, 'rollout id')}/v1"

    async def start(self) -> None:
        """Bind and start serving; ``url`` then holds the real port."""
        self.record_dir.mkdir(parents=True, exist_ok=True)
        connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout,
            skip_auto_headers=("User-Agent",),
            cookie_jar=aiohttp.DummyCookieJar(),  # a pass-through keeps no cookies of its own
        )  # fmt: skip
        server = web.Server(self._handle, handler_cancellation=True)
        self._runner = web.ServerRunner(server, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            await self._session.close()
            raise ContagentError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        sockets = self._runner.addresses
        if sockets:
            self.port = sockets[0][1]
        log.info(
            "recording proxy on %s -> %s, records in %s", self.url, self.upstream, self.record_dir
        )

    async def stop(self) -> None:
        """Stop listening, let in-flight exchanges finish (up to ``stop_grace``), record the rest."""
        self._stopping = True
        if self._runner is not None:
            for site in list(self._runner.sites):
                await site.stop()
        pending = {t for t in self._inflight if not t.done()}
        if pending:
            _, late = await asyncio.wait(pending, timeout=self._stop_grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=5.0)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        self.recorder.close()

    # -- the hot path ---------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        raw_path = request.raw_path
        if not raw_path.startswith("/r/"):
            return json_error(
                404, "use /r/<rollout_id>/v1/... (see contagent proxy --help)", "not_found"
            )
        rollout_id, sep, tail = raw_path[3:].partition("/")
        if not sep:
            return json_error(404, "nothing to forward: use /r/<rollout_id>/v1/...", "not_found")
        if self._only_rollout is not None and rollout_id != self._only_rollout:
            return json_error(403, "this proxy records another rollout", "permission_error")
        if self._clients is not None and not _client_in(request.remote, self._clients):
            return json_error(403, "this proxy does not serve your address", "permission_error")
        if rollout_id not in self.recorder.known:
            try:
                safe_segment(rollout_id, "rollout id")
            except ContagentError as exc:
                return json_error(400, str(exc), "invalid_request_error")
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            return await self._exchange(request, rollout_id, "/" + tail)
        finally:
            self._inflight.discard(task)

    async def _exchange(
        self, request: web.BaseRequest, rollout_id: str, path: str
    ) -> web.StreamResponse:
        body = await request.read()
        received = time.time()
        parsed: Any = None
        body_text = None
        if body:
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                body_text = body.decode("utf-8", "replace")
        stream = isinstance(parsed, dict) and parsed.get("stream") is True
        changes: list[str] = []
        forward_body = body
        if stream and path.partition("?")[0].endswith(_USAGE_ROUTES):
            opts = parsed.get("stream_options")
            if not (isinstance(opts, dict) and opts.get("include_usage") is True):
                changed = dict(parsed)
                changed["stream_options"] = {
                    **(opts if isinstance(opts, dict) else {}),
                    "include_usage": True,
                }
                forward_body = orjson.dumps(changed)
                changes.append("stream_options.include_usage")

        hop = _hop_tokens(request.headers)
        safe: dict[str, str] = {}
        forward: list[tuple[str, str]] = []
        for name, value in request.headers.items():
            low = name.lower()
            if low in SAFE_HEADERS:
                safe[low] = f"{safe[low]}, {value}" if low in safe else value
            if low not in _DROP_REQUEST and low not in hop:
                forward.append((name, value))
        forward.append(("Accept-Encoding", "identity"))
        if self._auth:
            forward.append(("Authorization", self._auth))

        recorder = self.recorder
        index = -1
        try:
            index = recorder.next_index(rollout_id)
            recorder.append(
                rollout_id,
                request_record(
                    index=index, rollout_id=rollout_id, time=received, method=request.method,
                    path=path, headers=safe, body=parsed, body_text=body_text,
                    body_sha256=hashlib.sha256(body).hexdigest(), body_bytes=len(body),
                    stream=stream, upstream_changes=changes,
                ),
            )  # fmt: skip
        except RecordError as exc:
            if index >= 0:
                recorder.release(rollout_id, index)
            log.error("%s", exc)
            return json_error(
                500, f"contagent proxy could not record the request: {exc}", "proxy_error"
            )
        ex = Exchange(self, rollout_id, index)
        return await ex.run(request, path, forward, forward_body)

    def _finish(self, record: dict[str, Any]) -> None:
        self.counts[record["outcome"]] += 1
        try:
            self.recorder.append(record["rollout_id"], record)
        except RecordError as exc:
            log.error("outcome of %s #%d lost: %s", record["rollout_id"], record["index"], exc)
