"""One forwarded exchange: relays the upstream response and writes its one outcome record.

The outcome is on disk before the client can see the end of the exchange: a
JSON body is recorded before it is sent, a stream before the chunk that
carries ``[DONE]`` (or before the end of the body, for streams without it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from contagent.proxy.recorder import outcome_record
from contagent.proxy.sse import SSEParser, StreamAssembler
from contagent.rules import completeness

if TYPE_CHECKING:
    from contagent.proxy.server import RecordingProxy

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "trailers", "transfer-encoding", "upgrade"}
)  # fmt: skip
#: aiohttp recomputes length/encoding of what it sends to the client
_DROP_RESPONSE = HOP_BY_HOP | {"content-length", "content-encoding"}


def error_body(status: int, message: str, kind: str = "upstream_error") -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "code": status}})


def json_error(status: int, message: str, kind: str = "upstream_error") -> web.Response:
    return web.Response(
        status=status, body=error_body(status, message, kind), content_type="application/json"
    )


class Exchange:
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
        return json_error(status, message)

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
                    if state.saw_done():
                        self._record_stream(None)  # on disk before the client sees the end
                    await resp.write(chunk)
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
            await resp.write(sep + b"data: " + error_body(code, broke) + b"\n\n")
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
