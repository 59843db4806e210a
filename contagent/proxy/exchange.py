"""One forwarded exchange: relays the upstream response and writes its one outcome record.

The outcome is on disk before the client can see the end of the exchange: a
JSON body is recorded before it is sent, a stream before the chunk that
carries its end event (its API's end marker, :meth:`contagent.wire.WireApi.is_end_event`),
or before the end of the body, for streams without one.
When the outcome cannot be written (a full disk), the client gets an error
instead of that body or that end: the agent never holds an answer the log lacks.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from contagent import wire
from contagent.proxy.addons import ResponseWatch
from contagent.proxy.downstream import ClientConnection
from contagent.proxy.http1 import relayed_response_headers
from contagent.proxy.recorder import verbatim
from contagent.proxy.stream_state import StreamState, is_end_event
from contagent.proxy.upstream import UpstreamConnection
from contagent.rawlog.records import completeness, outcome_record
from contagent.wire import WireApi

if TYPE_CHECKING:
    from contagent.proxy.token_route import Translation

log = logging.getLogger(__name__)


class ExchangeHost(Protocol):
    """What an exchange needs from the proxy that started it."""

    #: the proxy is stopping: a cut exchange is the proxy's fault, not the client's
    stopping: bool

    def finish(self, record: dict[str, Any], marks: dict[int, Any] | None = None) -> bool:
        """Append the outcome record; False (and logged) when it could not be written.
        ``marks``: what the addons noted when the exchange left upstream."""
        ...

    def over(self, ex: Exchange) -> None:
        """``ex`` needs nothing more from upstream."""
        ...

    def cancel_waiting(self, ex: Exchange) -> None:
        """Forget ``ex``'s request if it still waits for an upstream connection."""
        ...


_UNRECORDED = "contagent proxy could not record the response, so it is not passed on"


class Exchange:
    """One forwarded request; writes exactly one outcome record whichever way it ends.

    Driven by callbacks: the upstream connection calls ``on_head``, ``on_body``
    and one of ``on_end``/``on_fail``; the client connection calls
    ``client_gone`` when the agent leaves first, and the proxy ``cut`` when it
    stops before the exchange could end.
    """

    __slots__ = (
        "api", "body", "conn", "done", "first_byte", "gone", "head_only", "index", "marks", "out_headers", "proxy",
        "recorded", "rollout_id", "sent_status", "started", "status", "stream", "translation",
        "upstream", "watch",
    )  # fmt: skip

    def __init__(
        self,
        proxy: ExchangeHost,
        conn: ClientConnection,
        rollout_id: str,
        index: int,
        head_only: bool = False,
        watch: ResponseWatch | None = None,
        translation: Translation | None = None,
        api: WireApi | None = None,
    ) -> None:
        self.proxy = proxy
        #: the client's wire API, whose shape the proxy's own errors take (None: OpenAI's)
        self.api = wire.error_api(None) if api is None else api
        #: the token route's: the client's answer is made from the chat answer
        self.translation = translation
        #: an addon watches this exchange's response (token capture)
        self.watch = watch
        self.head_only = head_only
        self.conn = conn
        self.rollout_id = rollout_id
        self.index = index
        self.started = time.time()
        self.first_byte: float | None = None
        self.status: int | None = None
        self.sent_status: int | None = None
        self.stream: StreamState | None = None
        self.out_headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.upstream: UpstreamConnection | None = None
        self.gone = False
        self.done = False
        self.recorded = False
        #: what the addons noted when it stopped needing upstream (a policy version, say)
        self.marks: dict[int, Any] | None = None

    def _record(self, outcome: str, error: str | None = None, **fields: Any) -> None:
        if self.done:
            return
        self.done = True
        self.recorded = self.proxy.finish(
            outcome_record(
                index=self.index, rollout_id=self.rollout_id, outcome=outcome, status=self.status,
                client_status=self.sent_status, started=self.started, first_byte=self.first_byte,
                ended=time.time(), error=error, **fields,
            ),
            self.marks,
        )  # fmt: skip

    # -- from the upstream connection ------------------------------------------------

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.first_byte = time.time()
        self.status = status
        out, sse = relayed_response_headers(headers, keep_length=self.head_only)
        # a translated error goes to the client whole, in its API's shape, as vLLM sends one
        if sse and not self.head_only and (self.translation is None or status == 200):
            self.stream = StreamState(self.watch, self.translation)
            self.sent_status = status
            self.conn.start_response(status, out)
        else:
            self.out_headers = out

    def on_body(self, data: bytes) -> None:
        if self.gone:  # dropped: bytes still parsed from the last read go nowhere
            return
        state = self.stream
        if state is None:
            self.body.append(data)
            return
        if state.relays and not self.done:
            self._relay(state, data)
            return
        if not self.done and state.may_end(data):
            clean = state.at_boundary()  # what the client holds so far ends between events
            state.add(data)
            if state.saw_done():
                self._record_stream(None)  # on disk before the client sees the end
                if not self.recorded:
                    self._withhold_end(clean)
                    return
            self.conn.send(data)
            return
        self.conn.send(data)
        if self.done:
            log.warning(
                "%s #%d: bytes after the end event not recorded", self.rollout_id, self.index
            )
        else:
            state.add(data)

    def _relay(self, state: StreamState, data: bytes) -> None:
        """A watched stream: each whole event goes on once the watch has seen and changed it."""
        sent = state.sent()  # the client's events so far: this read's may be withheld
        out = state.relay(data)
        if state.events and is_end_event(state.events[-1]):
            self._record_stream(None)  # on disk before the client sees the end
            if not self.recorded:
                self._withhold_end(True, sent)
                return
        if out:
            self.conn.send(out)

    def on_end(self) -> None:
        if self.gone:
            return
        self.proxy.over(self)
        if self.stream is not None:
            self._record_stream(None)
            if self.recorded:
                rest = self.stream.close()[0]
                if rest:
                    self.conn.send(rest)
                self._fault_event()
                self.conn.end()
            else:
                self._withhold_end(self.stream.client_at_boundary())
            return
        data = b"".join(self.body)
        self.body = []
        assert self.status is not None
        self.sent_status = self.status
        parsed = self._record_body(data)
        if not self.recorded:
            self.conn.respond_error(500, _UNRECORDED, "proxy_error", self.api)
            return
        translation = self.translation
        if translation is not None and self.status == 200:
            if translation.body is None:  # the outcome says why: upstream_error
                self.sent_status = 502
                fault = translation.fault or "no answer to translate"
                self.conn.respond_error(502, fault, "upstream_error", self.api)
                return
            data = orjson.dumps(translation.body)
        elif translation is not None:  # the upstream's error, made the client's
            data = orjson.dumps(translation.body)
            self.out_headers = [
                *[h for h in self.out_headers if h[0].lower() != b"content-type"],
                (b"Content-Type", b"application/json"),
            ]
        elif self.watch is not None and self.watch.hide(parsed):
            data = orjson.dumps(parsed)
        self.conn.respond(self.status, self.out_headers, data, self.head_only)

    def _fault_event(self) -> None:
        """A translated stream whose chat answer could not be translated ends with an error
        event: the client's stream is the proxy's making, cut where the translation failed."""
        fault = self.translation.fault if self.translation is not None else None
        if fault is not None and self.stream is not None:
            sent = self.stream.sent()
            self.conn.send(self.api.error_event(502, fault, "upstream_error", sent))

    def _withhold_end(self, clean: bool, sent: int | None = None) -> None:
        """The stream's outcome is not on disk: the client must not see its end.

        ``clean``: what the client holds ends between events, so an error event can
        follow. Otherwise it may hold part of the end event, which anything sent after
        would complete: cut the connection instead. ``sent``: the events the client got,
        when not all the stream's so far.
        """
        self._drop_upstream()  # nothing more may reach this client's connection
        if clean:
            assert self.stream is not None
            sent = self.stream.sent() if sent is None else sent
            self.conn.send(self.api.error_event(500, _UNRECORDED, "proxy_error", sent))
            self.conn.end()
        else:
            self.conn.abort()

    def on_fail(self, message: str, timed_out: bool) -> None:
        if self.gone:
            return
        self.proxy.over(self)
        code = 504 if timed_out else 502
        state = self.stream
        if state is None:  # the client has seen nothing yet
            self.sent_status = code
            self._record("upstream_error", message)
            self.conn.respond_error(code, message, "upstream_error", self.api)
            return
        # finish a half-sent event first so the error arrives as an event of its own
        sep = b"" if state.client_at_boundary() else b"\n\n"
        self._record_stream(message)
        rest = state.close()[0]
        event = self.api.error_event(code, message, "upstream_error", state.sent())
        self.conn.send(sep + rest + event)
        self.conn.end()

    # -- from the client connection and the proxy ------------------------------------

    def client_gone(self) -> None:
        """The agent went away first: cancel upstream at once, record what arrived."""
        self._drop_upstream()
        self._record_cut("client disconnected")

    def cut(self) -> None:
        """The proxy stops before this exchange ended: the client must see a cut, not an end."""
        self._drop_upstream()
        self._record_cut(None)
        self.conn.abort()

    def pause_upstream(self) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_upstream(self) -> None:
        if self.upstream is not None:
            self.upstream.resume_reading()

    def _drop_upstream(self) -> None:
        self.gone = True
        self.proxy.over(self)
        if self.upstream is not None:
            self.upstream.abort()
        else:
            self.proxy.cancel_waiting(self)

    def _record_cut(self, why: str | None) -> None:
        if self.proxy.stopping:
            outcome, error = "upstream_error", "proxy stopped before the exchange ended"
        else:
            outcome, error = "abandoned", why or "client disconnected"
        if self.stream is not None:
            self._record(outcome, error, **self.stream.fields()[0])
        else:
            self._record(outcome, error)

    # -- outcome records --------------------------------------------------------------

    def _record_body(self, data: bytes) -> Any:
        """Record a whole body; the JSON parsed from it (None when it is not JSON)."""
        try:
            parsed = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            parsed = None
        status = self.status
        if self.translation is not None and status is not None and status != 200:
            error = self.translation.error(status, data, parsed)
            self._record("http_error", f"http status {status}", **error)
            return None
        if parsed is None and data:
            text = data.decode("utf-8", "replace")
            if self.status == 200:
                self._record(
                    "upstream_error", "upstream body is not valid JSON", response_text=text
                )
            else:
                self._record("http_error", f"http status {self.status}", response_text=text)
            return None
        fields: dict[str, Any] = {"response": verbatim(data, parsed)}
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
            return parsed
        if self.watch is not None:
            self.watch.seen(parsed)
            fields.update(self.watch.fields())
        translation = self.translation
        if translation is not None:
            translation.reply(parsed)
            fields = translation.fields(fields)
            if translation.fault is not None:
                self.sent_status = 502
                self._record("upstream_error", translation.fault, **fields)
                return parsed
            parsed = fields["response"]
        ok, why = completeness(self.status, parsed)
        self._record("completed" if ok else "incomplete", why, **fields)
        return parsed

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
