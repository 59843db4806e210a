"""The recording proxy: ``/r/<rollout_id>/<path>`` is forwarded to ``UPSTREAM/<path>``.

Per exchange, in this order: the request record is appended (index assigned
in the same synchronous step), the request goes upstream, the response goes
to the client (streams chunk by chunk as they arrive), then the outcome
record is appended. Parsing and recording of the response happen after the
client has its bytes, so they add no latency the agent can see.

The proxy never retries. A client that goes away cancels its handler
(``handler_cancellation``), which closes the upstream connection at once so
the server stops generating.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from contagent.errors import ContagentError
from contagent.layout import safe_segment
from contagent.proxy.recorder import Recorder, RecordError, outcome_record, request_record
from contagent.proxy.sse import SSEParser, StreamAssembler
from contagent.records import SAFE_HEADERS
from contagent.rules import completeness

log = logging.getLogger(__name__)

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "trailers", "transfer-encoding", "upgrade"}
)  # fmt: skip
#: never forwarded: hop-by-hop, recomputed by aiohttp, or the client's credentials
_DROP_REQUEST = _HOP_BY_HOP | {
    "host",
    "content-length",
    "authorization",
    "api-key",
    "x-api-key",
    "accept-encoding",
}
#: aiohttp recomputes length/encoding of what it sends to the client
_DROP_RESPONSE = _HOP_BY_HOP | {"content-length", "content-encoding"}
_USAGE_ROUTES = ("/chat/completions", "/completions")


def _error_body(status: int, message: str, kind: str = "upstream_error") -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "code": status}})


def _json_error(status: int, message: str, kind: str = "upstream_error") -> web.Response:
    return web.Response(
        status=status, body=_error_body(status, message, kind), content_type="application/json"
    )


def _hop_tokens(headers: Any) -> frozenset[str]:
    conn = headers.get("Connection")
    if not conn:
        return frozenset()
    return frozenset(t.strip().lower() for t in conn.split(","))


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
    ) -> None:
        base = upstream.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ContagentError(f"upstream {upstream!r} is not an http(s) URL")
        if base.endswith("/v1"):  # the client adds /v1 itself: accept either spelling
            base = base[:-3]
        self.upstream = base
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
            return _json_error(
                404, "use /r/<rollout_id>/v1/... (see contagent proxy --help)", "not_found"
            )
        rollout_id, sep, tail = raw_path[3:].partition("/")
        if not sep:
            return _json_error(404, "nothing to forward: use /r/<rollout_id>/v1/...", "not_found")
        if rollout_id not in self.recorder.known:
            try:
                safe_segment(rollout_id, "rollout id")
            except ContagentError as exc:
                return _json_error(400, str(exc), "invalid_request_error")
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
            return _json_error(
                500, f"contagent proxy could not record the request: {exc}", "proxy_error"
            )
        ex = _Exchange(self, rollout_id, index)
        return await ex.run(request, path, forward, forward_body)

    def _finish(self, record: dict[str, Any]) -> None:
        self.counts[record["outcome"]] += 1
        try:
            self.recorder.append(record["rollout_id"], record)
        except RecordError as exc:
            log.error("outcome of %s #%d lost: %s", record["rollout_id"], record["index"], exc)


class _Exchange:
    """One forwarded request; writes exactly one outcome record whichever way it ends.

    The outcome is on disk before the client can see the end of the exchange:
    a JSON body is recorded before it is sent, a stream before the chunk that
    carries ``[DONE]`` (or before the end of the body, for streams without it).
    """

    __slots__ = (
        "done", "first_byte", "index", "proxy", "rollout_id", "sent_status", "started", "status", "stream",
    )  # fmt: skip

    def __init__(self, proxy: RecordingProxy, rollout_id: str, index: int) -> None:
        self.proxy = proxy
        self.rollout_id = rollout_id
        self.index = index
        self.started = time.time()
        self.first_byte: float | None = None
        self.status: int | None = None
        self.sent_status: int | None = None
        self.stream: _StreamState | None = None
        self.done = False

    def _record(self, outcome: str, error: str | None = None, **fields: Any) -> None:
        if self.done:
            return
        self.done = True
        self.proxy._finish(
            outcome_record(
                index=self.index, rollout_id=self.rollout_id, outcome=outcome, status=self.status,
                client_status=self.sent_status, started=self.started, first_byte=self.first_byte,
                ended=time.time(), error=error, **fields,
            )
        )  # fmt: skip

    async def run(
        self, request: web.BaseRequest, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> web.StreamResponse:
        proxy = self.proxy
        assert proxy._session is not None
        try:
            async with proxy._session.request(
                request.method, URL(proxy.upstream + path, encoded=True), data=body or None, headers=headers,
                allow_redirects=False,
            ) as up:  # fmt: skip
                self.first_byte = time.time()
                self.status = up.status
                out_headers = [
                    (k, v) for k, v in up.headers.items() if k.lower() not in _DROP_RESPONSE
                ]
                if up.headers.get("Content-Type", "").startswith("text/event-stream"):
                    return await self._relay_stream(request, up, out_headers)
                data = await up.read()
                self.sent_status = up.status
                self._record_body(data)
                resp = web.Response(status=up.status, body=data, headers=out_headers)
                await resp.prepare(request)
                await resp.write_eof()
                return resp
        except asyncio.CancelledError:
            self._record_cut(None)
            raise
        except (ConnectionResetError, aiohttp.ClientConnectionResetError) as exc:
            # raised by writes to a client that has gone away
            self._record_cut(f"client went away: {exc}")
            raise
        except TimeoutError:
            return self._fail(504, "upstream timed out")
        except (aiohttp.ClientError, OSError) as exc:
            return self._fail(502, f"upstream unreachable: {exc}")

    def _fail(self, status: int, message: str) -> web.Response:
        self.sent_status = status
        self._record("upstream_error", message)
        return _json_error(status, message)

    def _record_cut(self, why: str | None) -> None:
        """The handler stops early: client gone (abandoned) or proxy stopping."""
        if self.proxy._stopping:
            outcome, error = "upstream_error", "proxy stopped before the exchange ended"
        else:
            outcome, error = "abandoned", why or "client disconnected"
        if self.stream is not None:
            self._record(outcome, error, **self.stream.fields()[0])
        else:
            self._record(outcome, error)

    def _record_body(self, data: bytes) -> None:
        try:
            parsed = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            parsed = None
        if parsed is None and data:
            text = data.decode("utf-8", "replace")
            if self.status == 200:
                self._record(
                    "upstream_error", "upstream body is not valid JSON", response_text=text
                )
            else:
                self._record("http_error", f"http status {self.status}", response_text=text)
            return
        fields: dict[str, Any] = {"response": parsed}
        if isinstance(parsed, dict):
            if isinstance(parsed.get("usage"), dict):
                fields["usage"] = parsed["usage"]
            choices = parsed.get("choices")
            if isinstance(choices, list):
                fields["finish_reasons"] = [
                    c.get("finish_reason") if isinstance(c, dict) else None for c in choices
                ]
        if self.status != 200:
            self._record("http_error", f"http status {self.status}", **fields)
            return
        ok, why = completeness(self.status, parsed)
        self._record("completed" if ok else "incomplete", why, **fields)

    def _record_stream(self, broke: str | None) -> None:
        assert self.stream is not None
        fields, fault = self.stream.fields()
        if broke is not None:
            self._record("upstream_error", broke, **fields)
        elif self.status != 200:
            self._record("http_error", f"http status {self.status}", **fields)
        elif fault:
            self._record("upstream_error", fault, **fields)
        else:
            ok, why = completeness(self.status, fields["response"])
            self._record("completed" if ok else "incomplete", why, **fields)

    async def _relay_stream(
        self, request: web.BaseRequest, up: aiohttp.ClientResponse, headers: list[tuple[str, str]]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, headers=headers)
        self.sent_status = up.status
        await resp.prepare(request)
        state = self.stream = _StreamState()
        broke: str | None = None
        try:
            async for chunk in up.content.iter_any():
                if not self.done and b"[DONE]" in chunk:
                    state.add(chunk)
                    # The lines before the one holding "[DONE]" cannot end the stream:
                    # send them at once (a burst often arrives as one chunk with the
                    # whole stream), and only the rest after the record is written.
                    cut = chunk.rfind(b"\n", 0, chunk.find(b"[DONE]")) + 1
                    if cut:
                        await resp.write(memoryview(chunk)[:cut])
                    if state.saw_done():
                        self._record_stream(None)  # on disk before the client sees the end
                    await resp.write(memoryview(chunk)[cut:] if cut else chunk)
                    continue
                await resp.write(chunk)
                if self.done:
                    log.warning(
                        "%s #%d: bytes after [DONE] not recorded", self.rollout_id, self.index
                    )
                else:
                    state.add(chunk)
        except TimeoutError:
            broke = "upstream timed out mid-stream"
        except aiohttp.ClientConnectionResetError:
            raise  # the client's side; handled as abandoned by run()
        except (aiohttp.ClientError, OSError) as exc:
            broke = f"upstream stream broke: {exc}"
        if broke is not None:
            up.close()
            # finish a half-sent event first so the error arrives as an event of its own
            sep = b"" if state.at_boundary() else b"\n\n"
            self._record_stream(broke)
            code = 504 if "timed out" in broke else 502
            await resp.write(sep + b"data: " + _error_body(code, broke) + b"\n\n")
        else:
            self._record_stream(None)
        await resp.write_eof()
        return resp


class _StreamState:
    """What a relayed stream carried so far.

    Chunks are only collected while they flow, and parsed when the record is
    due: the per-event work then never competes with relaying the next chunk.
    """

    __slots__ = ("asm", "events", "parser", "pending")

    def __init__(self) -> None:
        self.parser = SSEParser()
        self.asm = StreamAssembler()
        self.events: list[str] = []
        self.pending: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        self.pending.append(chunk)

    def _parse(self) -> None:
        if not self.pending:
            return
        data = b"".join(self.pending)
        self.pending.clear()
        events = self.parser.feed(data)
        self.events.extend(events)
        self.asm.feed_many(events)

    def saw_done(self) -> bool:
        self._parse()
        return bool(self.events) and self.events[-1] == "[DONE]"

    def at_boundary(self) -> bool:
        self._parse()
        return self.parser.at_boundary

    def fields(self) -> tuple[dict[str, Any], str | None]:
        """Outcome fields of what arrived so far, and a fault found in it, if any."""
        self._parse()
        last, tail = self.parser.close()
        self.events.extend(last)
        self.asm.feed_many(last)
        asm = self.asm
        fault = None
        if asm.malformed:
            fault = f"{asm.malformed} stream event(s) are not valid JSON"
        elif tail:
            fault = f"stream ended inside an event ({len(tail)} bytes unterminated)"
        elif not self.events:
            fault = "stream carried no events"
        fields: dict[str, Any] = {
            "response": asm.result(),
            "stream_events": self.events,
            "usage": asm.usage,
            "finish_reasons": asm.finish_reasons,
        }
        if tail:
            fields["response_text"] = tail.decode("utf-8", "replace")
        return fields, fault
