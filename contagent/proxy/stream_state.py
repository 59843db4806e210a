"""The state of one relayed stream: the events it carried, parsed when the record is due."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from contagent import wire
from contagent.proxy.addons import ResponseWatch
from contagent.proxy.sse import SSEParser
from contagent.wire import is_end_event
from contagent.wire.stream_fold import StreamAssembler

if TYPE_CHECKING:
    from contagent.proxy.token_route import Translation

#: what an end event holds, in any API (built once: read for every relayed chunk)
_END_MARKERS = wire.end_markers()
_TAIL = max(map(len, _END_MARKERS)) - 1
#: the markers that are a whole end event's data by themselves (chat's, which is no JSON)
_WHOLE_ENDS = frozenset(m.decode() for m in _END_MARKERS if is_end_event(m.decode()))
#: the wire API a translated exchange's upstream speaks
_CHAT = wire.adapter("chat")


class StreamState:
    """What a relayed stream carried so far.

    Chunks are only collected while they flow, and parsed when the record is
    due: the per-event work then never competes with relaying the next chunk.
    With an addon watching the response (``watch``, token capture), each read is parsed at
    once instead (:meth:`relay`): the client gets whole events only, each as the watch
    changed it, and the watch sees each on the way. A translated exchange (the token route,
    ``translation``) is relayed so too, the client getting the events the translation makes
    of each chunk.
    """

    __slots__ = (
        "asm", "closed", "done_seen", "events", "fed", "parser", "pending", "relays", "tail",
        "translation", "watch",
    )  # fmt: skip

    def __init__(
        self, watch: ResponseWatch | None = None, translation: Translation | None = None
    ) -> None:
        self.parser = SSEParser()
        self.asm = StreamAssembler()
        self.events: list[str] = []
        self.fed = 0  # events fed to the assembler so far
        self.pending: list[bytes] = []
        self.tail = b""  # the stream's last bytes: an end marker may be split across reads
        self.done_seen = False
        self.watch = watch
        self.translation = translation
        #: each read is parsed at once and relayed event by event
        self.relays = watch is not None or translation is not None
        #: once the stream is over: (what the client still gets of it, a partial last line)
        self.closed: tuple[bytes, bytes] | None = None

    def may_end(self, chunk: bytes) -> bool:
        """Whether ``chunk`` may complete the end event, so the record is due first.

        Once an end marker has shown up (even split across reads), every later chunk is a
        candidate until the event is whole: its closing blank line may come on its own.
        (A marker inside a token only makes the chunks after it parsed sooner.)
        """
        if not self.done_seen:
            seam = self.tail + chunk[:_TAIL]
            self.done_seen = any(m in chunk or m in seam for m in _END_MARKERS)
            self.tail = chunk[-_TAIL:] if len(chunk) >= _TAIL else (self.tail + chunk)[-_TAIL:]
        return self.done_seen

    def add(self, chunk: bytes) -> None:
        self.pending.append(chunk)

    def relay(self, chunk: bytes) -> bytes:
        """With a watch: the client's bytes for the events ``chunk`` completed."""
        payloads = self.parser.feed(chunk)
        self.events.extend(payloads)
        return self._relayed(payloads)

    def _relayed(self, payloads: list[str]) -> bytes:
        """The client's bytes for ``payloads``, which the watch also sees and are assembled."""
        watch, asm, translation = self.watch, self.asm, self.translation
        if translation is not None:
            out = b"".join([translated_event(p, watch, asm, translation) for p in payloads])
        else:
            assert watch is not None
            out = b"".join([relay_event(p, watch, asm) for p in payloads])
        self.fed = len(self.events)
        return out

    def _parse(self) -> None:
        if self.pending:
            data = b"".join(self.pending)
            self.pending.clear()
            self.events.extend(self.parser.feed(data))
        if self.fed < len(self.events):
            self.asm.feed_many(self.events[self.fed :] if self.fed else self.events)
            self.fed = len(self.events)

    def saw_done(self) -> bool:
        self._parse()
        return bool(self.events) and is_end_event(self.events[-1])

    def at_boundary(self) -> bool:
        self._parse()
        return self.parser.at_boundary

    def client_at_boundary(self) -> bool:
        """What the client holds so far ends between events (always, with a watch)."""
        return self.relays or self.at_boundary()

    def close(self) -> tuple[bytes, bytes]:
        """The stream is over: (the client's bytes of a final event left unterminated,
        with a watch; the partial last line). Idempotent."""
        if self.closed is None:
            self._parse()
            last, tail = self.parser.close()
            self.events.extend(last)
            if self.relays:
                self.closed = (self._relayed(last), tail)
            else:
                self._parse()
                self.closed = (b"", tail)
        return self.closed

    def sent(self) -> int:
        """How many events the stream gave the client so far (parsed ones: all, once closed)."""
        return len(self.translation.events) if self.translation is not None else len(self.events)

    def fields(self) -> tuple[dict[str, Any], str | None]:
        """Outcome fields of what arrived so far, and a fault found in it, if any."""
        tail = self.close()[1]
        asm = self.asm
        fault = None
        if asm.malformed:
            fault = f"{asm.malformed} stream event(s) are not valid JSON"
        elif asm.misplaced:
            fault = f"{asm.misplaced} stream event(s) fit no place in the message"
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
        if self.watch is not None:
            fields.update(self.watch.fields())
        if self.translation is not None:
            fault = fault or self.translation.fault
            fields = self.translation.fields(fields)
        return fields, fault


def relay_event(payload: str, watch: ResponseWatch, asm: StreamAssembler) -> bytes:
    """One stream event as the client gets it, fed to the stream's assembler and seen by the
    watch first (parsed once for all three)."""
    if payload in _WHOLE_ENDS:
        return b"data: " + payload.encode() + b"\n\n"
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        asm.feed(payload)  # counted as malformed there
        return b"data: " + payload.encode().replace(b"\n", b"\ndata: ") + b"\n\n"
    asm.feed_event(event)
    if isinstance(event, dict):
        watch.seen(event)
        if watch.hide(event):
            return b"data: " + orjson.dumps(event) + b"\n\n"
    # unchanged: the payload as received (a multi-line one keeps its lines)
    return b"data: " + payload.encode().replace(b"\n", b"\ndata: ") + b"\n\n"


def translated_event(
    payload: str, watch: ResponseWatch | None, asm: StreamAssembler, translation: Translation
) -> bytes:
    """The client's events for one chat chunk of a translated exchange, the chunk fed to the
    stream's assembler and seen by the watch first. The upstream speaks chat completions,
    so its end marker is the chat adapter's, the one the rebuild on read recognises too."""
    if _CHAT.is_end_event(payload):
        return translation.relay(payload)
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        asm.feed(payload)  # counted as malformed there
        return translation.relay(payload)
    asm.feed_event(event)
    if watch is not None and isinstance(event, dict):
        watch.seen(event)
    return translation.relay(event)
