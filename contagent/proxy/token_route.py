"""The token route: a Messages or Responses request served from the upstream's chat completions.

vLLM returns token ids on chat completions only, so while tokens are recorded (or when the
user asks with ``--messages-route chat`` / ``--responses-route chat``) a client's
Messages or Responses request goes upstream to the chat-completions route (the client's
route with its API's ending replaced) as the chat request vLLM's own Messages or Responses server
would have made of it (:mod:`contagent.wire.translate.via_chat`). The addons then see a chat
request (token capture, sampling, the chat template), and the client gets the chat answer
translated back: a JSON body whole, a stream event by event as each chunk arrives.

:func:`route_request` is the one step the proxy takes per request: it decides the route and,
for a translated request, gives the upstream path, the chat body and a :class:`Translation`
the exchange consults for the client's answer and the outcome record. A request the
translation cannot carry faithfully is refused with one line (:attr:`Routed.refusal`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

import orjson

from contagent import wire
from contagent.errors import ContagentError
from contagent.proxy.addons import Flow, request_flow
from contagent.proxy.recorder import verbatim
from contagent.rawlog.records import UPSTREAM_ANSWER_FIELDS, outcome_record
from contagent.wire.translate import Untranslatable
from contagent.wire.translate.via_chat import (
    ANSWER_FAULTS,
    TABLE,
    ClientAnswer,
    Drawn,
    TemplateDecisions,
    ViaChat,
    client_stream,
)

if TYPE_CHECKING:
    from contagent.proxy.addons import ProxyAddon
    from contagent.proxy.downstream import ClientConnection

RouteMode = Literal["native", "chat"]
ROUTE_MODES: tuple[str, ...] = get_args(RouteMode)
#: the chat API's adapter name
_CHAT = "chat"


def check_route_mode(mode: str | None, flag: str) -> str | None:
    """``mode`` when it is a route mode (None: the default); one line when it is not."""
    if mode is not None and mode not in ROUTE_MODES:
        raise ContagentError(f"{flag} {mode!r}: use one of {', '.join(ROUTE_MODES)}")
    return mode


@dataclass(frozen=True)
class RouteChoice:
    """Per client API, ``native`` or ``chat``; None: chat exactly when tokens are recorded."""

    messages: str | None = None
    responses: str | None = None

    def via_chat(self, api: str, tokens: bool) -> bool:
        mode = (
            self.messages if api == "messages" else self.responses if api == "responses" else None
        )
        if api not in TABLE:
            return False
        return tokens if mode is None else mode == "chat"

    def start_line(self, line: str, tokens: bool) -> str:
        """The ``--tokens`` start line (:attr:`contagent.proxy.identify.TokenPlan.line`) saying
        how each client API is served, e.g. ``tokens: recorded on chat, messages (via chat),
        responses (via chat) (the upstream is vLLM 0.32.0)``."""
        routed = [f"{api} (via chat)" for api in TABLE if self.via_chat(api, tokens)]
        if tokens and line.startswith(_RECORDED):
            return f"{_RECORDED} on {', '.join([_CHAT, *routed])}{line[len(_RECORDED) :]}"
        return line + (f"; {', '.join(routed)}" if routed else "")


#: how the start line of recorded tokens begins
_RECORDED = "tokens: recorded"


@dataclass
class Routed:
    """One request as the route sends it upstream."""

    #: the addons' view and changes (None: not a JSON request of a wire API)
    flow: Flow | None
    #: the path with its query as it goes upstream
    raw: bytes
    #: the request record's fields the route sets (``upstream``)
    record: dict[str, Any]
    translation: Translation | None = None
    #: why the translation refused it (one line), and the client's 400 body
    refusal: str | None = None
    refusal_body: bytes = b""
    #: the client asked for a streamed answer
    stream: bool = False

    @property
    def changed(self) -> bool:
        """The body going upstream is not the client's."""
        return self.translation is not None or bool(self.flow is not None and self.flow.changes)

    def refuse(
        self, conn: ClientConnection, finish: Callable[[dict[str, Any]], bool],
        request: dict[str, Any], api: wire.WireApi,
    ) -> None:  # fmt: skip
        """Record the refusal as the outcome of ``request`` (its record), then answer 400
        (an error in the shape of ``api``, the client's, when the record cannot be written)."""
        outcome = outcome_record(
            index=request["index"], rollout_id=request["rollout_id"], outcome="http_error",
            status=None, client_status=400, started=request["time"], ended=time.time(),
            error=f"not translated: {self.refusal}",
        )  # fmt: skip
        if finish(outcome):
            conn.respond(400, [(b"Content-Type", b"application/json")], self.refusal_body)
        else:
            message = "contagent proxy could not record the refusal"
            conn.respond_error(500, message, "proxy_error", api)


def route_request(
    parsed: Any,
    raw: bytes,
    method: str,
    addons: list[ProxyAddon],
    choice: RouteChoice,
    tokens: bool,
    server: Any,
) -> Routed:
    """The route of one request (``raw``: its path with query): the addons' flow over the
    body that goes upstream, translated to chat where the route says so."""
    path = raw.decode("latin-1")
    route = path.partition("?")[0]
    stream = isinstance(parsed, dict) and parsed.get("stream") is True
    api = wire.for_route(route) if isinstance(parsed, dict) and method == "POST" else None
    if api is None or not choice.via_chat(api.name, tokens):
        return Routed(request_flow(parsed, route, stream, addons), raw, {}, stream=stream)
    via = TABLE[api.name]
    try:
        chat = via.request(parsed, TemplateDecisions.of_server(server))
    except Untranslatable as exc:
        return Routed(None, raw, {}, refusal=str(exc), refusal_body=via.refusal(str(exc)),
                      stream=stream)  # fmt: skip
    up_path = route.rstrip("/").removesuffix(api.routes[0]) + wire.adapter(_CHAT).routes[0]
    flow = request_flow(chat, up_path, stream, addons)
    assert flow is not None  # a chat body on the chat route
    translation = Translation(via, parsed, stream)
    translation.start(server, flow.record.get("sampling"))
    return Routed(flow, up_path.encode("latin-1"), {"upstream": {"path": up_path, "body": chat}},
                  translation, stream=stream)  # fmt: skip


class Translation:
    """One translated exchange: the client's answer made from the chat answer as it
    arrives, and the outcome record's fields for both sides."""

    __slots__ = ("_answer", "_via", "body", "drawn", "events", "fault", "request", "stream")

    def __init__(self, via: ViaChat, request: dict[str, Any], stream: bool) -> None:
        self._via = via
        self._answer: ClientAnswer | None = None
        self.request = request
        self.stream = stream
        self.drawn = Drawn()
        #: the client's stream events, in order, as sent
        self.events: list[bytes] = []
        #: the client's JSON body, once made
        self.body: dict[str, Any] | None = None
        #: why the chat answer could not be translated (the exchange then failed)
        self.fault: str | None = None

    def start(self, server: Any, sampling: Any) -> None:
        """Ready the answer maker with what the request record says (before any answer)."""
        self._answer = self._via.client(self.request, self.drawn, server, sampling)

    def relay(self, chunk: Any) -> bytes:
        """The client's bytes for one chat chunk (parsed, or the end marker)."""
        if self.fault is not None or self._answer is None:
            return b""
        try:
            out = self._answer.events(chunk)
        except ANSWER_FAULTS as exc:
            self.fault = _fault(exc)
            return b""
        self.events.extend(out)
        return b"".join(out)

    def reply(self, chat: Any) -> bytes | None:
        """The client's JSON body for a whole chat completion; None when it has none."""
        if self._answer is None or not isinstance(chat, dict):
            self.fault = "the upstream answer is not a chat completion"
            return None
        try:
            self.body = self._answer.reply(chat)
        except ANSWER_FAULTS as exc:
            self.fault = _fault(exc)
            return None
        return orjson.dumps(self.body)

    def error(self, status: int, data: bytes, parsed: Any) -> dict[str, Any]:
        """The outcome record's fields for an upstream error answer (``status`` not 200; its
        bytes, and their JSON, None when not JSON): the client's error (:attr:`body`, sent
        under the same status) on top, the upstream's as received in ``upstream``."""
        side: dict[str, Any] = dict.fromkeys(UPSTREAM_ANSWER_FIELDS)
        side["finish_reasons"] = []
        if parsed is None and data:
            side["response_text"] = data.decode("utf-8", "replace")
        else:
            side["response"] = verbatim(data, parsed)
        self.body = self._via.error(status, parsed)
        return {"response": self.body, "upstream": side}

    def fields(self, upstream: dict[str, Any]) -> dict[str, Any]:
        """The outcome record's fields: the client's answer on top, the chat answer it was
        made from in ``upstream`` (``upstream``: the fields as recorded for a chat exchange;
        its ``tokens`` stay on top)."""
        side = {k: upstream.get(k) for k in UPSTREAM_ANSWER_FIELDS}
        side["finish_reasons"] = side["finish_reasons"] or []
        out = {k: v for k, v in upstream.items() if k not in side}
        out["upstream"] = side
        out["drawn"] = self.drawn.values
        if self.body is None and self.stream:  # a JSON answer to a stream request is a body
            payloads, response, usage = client_stream(self.events)
            out.update(response=response, stream_events=payloads, usage=usage)
        else:
            body = self.body
            out["response"] = body
            out["usage"] = body.get("usage") if isinstance(body, dict) else None
        out["finish_reasons"] = []
        return out


def _fault(exc: Exception) -> str:
    return f"the upstream answer could not be translated ({type(exc).__name__}: {exc})"[:300]
