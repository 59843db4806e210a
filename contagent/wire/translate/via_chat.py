"""A Messages or Responses exchange served from chat completions, one exchange at a time.

The table :data:`TABLE` names, per client API, a :class:`ViaChat`: the chat request for a
client's request (:meth:`ViaChat.request`), and the client's answer made from the chat answer
(:meth:`ViaChat.client`: the whole JSON reply, or the events of each chat chunk as it
arrives). What the translation draws at random (a thinking block's signature, a Responses
id or timestamp) goes through one :class:`Drawn`, which records each value as it is drawn,
or gives back recorded ones in order: the same chat answer and the same recorded values
rebuild the client's answer byte for byte (what ``validate`` checks).

The two decisions vLLM's Messages server takes by probing its template are the server's
(:class:`TemplateDecisions`, read from the server the proxy identified). A request that
depends on a decision that is not known is refused rather than rendered one way or the
other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from contagent.rules.sampling import recorded_sampling
from contagent.wire.error_shapes import anthropic_error, openai_error
from contagent.wire.stream_fold import StreamAssembler
from contagent.wire.translate import Untranslatable
from contagent.wire.translate.error_answer import messages_error, responses_error

# The translations themselves are imported on a route's first use: a proxy whose requests
# take no token route never loads them (its start-up is measured).
if TYPE_CHECKING:
    from contagent.wire.translate.anthropic_events import MessagesEvents
    from contagent.wire.translate.responses_events import ResponsesEvents
    from contagent.wire.translate.responses_reply import ReplyContext


@dataclass(frozen=True)
class TemplateDecisions:
    """What the served template decides, as probed (None: not known)."""

    #: a system message inside ``messages`` is merged into the leading one
    merge_inline_system: bool | None = None
    #: the ``reasoning_effort`` that ``thinking: disabled`` becomes
    thinking_off_effort: str | None = None

    @classmethod
    def of_server(cls, server: Any) -> TemplateDecisions:
        """The decisions a request record's ``server`` holds."""
        if not isinstance(server, dict):
            return cls()
        inline = server.get("inline_system")
        effort = server.get("thinking_off_effort")
        return cls(
            None if inline is None else inline == "merged",
            effort if isinstance(effort, str) else None,
        )


class Drawn:
    """The values one translation draws at random, by kind, in the order drawn.

    Live (``recorded`` None), each value is made and kept (:attr:`values`); replaying a
    record, each is taken from it in order, and running out raises :class:`Untranslatable`.
    """

    __slots__ = ("_replay", "values")

    def __init__(self, recorded: dict[str, list[Any]] | None = None) -> None:
        self.values: dict[str, list[Any]] = {}
        self._replay = None if recorded is None else {k: list(v) for k, v in recorded.items()}

    def take(self, kind: str, make: Callable[[], Any]) -> Any:
        if self._replay is not None:
            left = self._replay.get(kind)
            if not left:
                raise Untranslatable(f"the record holds too few drawn values of kind {kind!r}")
            value = left.pop(0)
        else:
            value = make()
        self.values.setdefault(kind, []).append(value)
        return value


class ClientAnswer(Protocol):
    """The client's answer to one translated exchange, made from the chat answer."""

    def reply(self, chat: dict[str, Any]) -> dict[str, Any]:
        """The client's JSON body for a whole chat completion."""
        ...

    def events(self, chunk: Any) -> list[bytes]:
        """The client's stream events one chat chunk (parsed, or its end marker) completes."""
        ...


class ViaChat(Protocol):
    """One client API served from chat completions."""

    def request(self, body: Any, decisions: TemplateDecisions) -> dict[str, Any]:
        """The chat request for the client's ``body``; raises :class:`Untranslatable`."""
        ...

    def client(
        self, body: dict[str, Any], drawn: Drawn, server: Any, sampling: Any
    ) -> ClientAnswer:
        """The answer maker for one exchange (``server``, ``sampling``: the request record's)."""
        ...

    def refusal(self, message: str) -> bytes:
        """The client's error body for a request the translation refuses (status 400)."""
        ...

    def error(self, status: int, body: Any) -> dict[str, Any]:
        """The client's error for the upstream's error answer (status not 200; ``body``: the
        answer parsed as JSON, None when it is not JSON), sent under the same status."""
        ...


class _MessagesAnswer:
    __slots__ = ("_events", "_sign")

    def __init__(self, drawn: Drawn) -> None:
        from contagent.wire.translate.anthropic_reply import new_signature

        self._sign: Callable[[], str] = lambda: drawn.take("signature", new_signature)
        self._events: MessagesEvents | None = None

    def reply(self, chat: dict[str, Any]) -> dict[str, Any]:
        from contagent.wire.translate.anthropic_reply import to_messages_response

        return to_messages_response(chat, self._sign)

    def events(self, chunk: Any) -> list[bytes]:
        if self._events is None:
            from contagent.wire.translate.anthropic_events import MessagesEvents

            self._events = MessagesEvents(self._sign)
        return self._events.feed(chunk)


class MessagesViaChat:
    """The Anthropic Messages API (Claude Code) from chat completions."""

    def request(self, body: Any, decisions: TemplateDecisions) -> dict[str, Any]:
        from contagent.wire.translate import anthropic_request as messages_request

        if isinstance(body, dict):
            _known(decisions, body)
        return messages_request.to_chat_request(
            body,
            merge_inline_system=bool(decisions.merge_inline_system),
            disabled_thinking_effort=decisions.thinking_off_effort or "none",
        )

    def client(
        self, body: dict[str, Any], drawn: Drawn, server: Any, sampling: Any
    ) -> ClientAnswer:
        return _MessagesAnswer(drawn)

    def refusal(self, message: str) -> bytes:
        return orjson.dumps(anthropic_error("invalid_request_error", message))

    def error(self, status: int, body: Any) -> dict[str, Any]:
        return messages_error(status, body)


def _known(decisions: TemplateDecisions, body: dict[str, Any]) -> None:
    """Refuse a request whose rendering hangs on a template decision not known."""
    messages = body.get("messages")
    inline = isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("role") == "system" for m in messages
    )
    if inline and decisions.merge_inline_system is None:
        raise Untranslatable(
            "a system message inside messages: how the server's template renders it is "
            "not known (its probe went unanswered)"
        )
    thinking = body.get("thinking")
    if (
        isinstance(thinking, dict)
        and thinking.get("type") == "disabled"
        and decisions.thinking_off_effort is None
    ):
        raise Untranslatable(
            "thinking disabled: how the server's template turns thinking off is not known "
            "(its probe went unanswered)"
        )


class _ResponsesAnswer:
    __slots__ = ("_ctx", "_events")

    def __init__(self, ctx: ReplyContext) -> None:
        self._ctx = ctx
        self._events: ResponsesEvents | None = None

    def reply(self, chat: dict[str, Any]) -> dict[str, Any]:
        from contagent.wire.translate.responses_reply import to_responses_response

        return to_responses_response(chat, self._ctx)

    def events(self, chunk: Any) -> list[bytes]:
        if self._events is None:
            from contagent.wire.translate.responses_events import ResponsesEvents

            self._events = ResponsesEvents(self._ctx)
        return self._events.feed(chunk)


class ResponsesViaChat:
    """The OpenAI Responses API (Codex) from chat completions."""

    def request(self, body: Any, decisions: TemplateDecisions) -> dict[str, Any]:
        from contagent.wire.translate import responses_request

        return responses_request.to_chat_request(body)

    def client(
        self, body: dict[str, Any], drawn: Drawn, server: Any, sampling: Any
    ) -> ClientAnswer:
        from contagent.wire.translate.responses_reply import ReplyContext, new_id

        length = server.get("max_model_len") if isinstance(server, dict) else None
        ctx = ReplyContext(
            request=body,
            response_id=drawn.take("response_id", lambda: new_id("resp")),
            created_at=drawn.take("created_at", lambda: int(time.time())),
            max_model_len=length if isinstance(length, int) else None,
            defaults={k: v for k, v in recorded_sampling(sampling)[0].items() if v is not None},
            make_id=lambda prefix: drawn.take("id", lambda: new_id(prefix)),
        )
        return _ResponsesAnswer(ctx)

    def refusal(self, message: str) -> bytes:
        return orjson.dumps(openai_error(400, "invalid_request_error", message))

    def error(self, status: int, body: Any) -> dict[str, Any]:
        return responses_error(status, body)


#: client API name (:data:`contagent.wire.TABLE`'s) -> how it is served from chat completions
TABLE: dict[str, ViaChat] = {"messages": MessagesViaChat(), "responses": ResponsesViaChat()}

#: what a translation raises on a chat answer it cannot read (the answer is untrusted): the
#: proxy's fault while it serves one and the rebuild's mismatch on read are the same set
ANSWER_FAULTS = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def event_payload(event: bytes) -> str:
    """The ``data`` of one event the translation wrote (``event: ...\\ndata: {...}\\n\\n``)."""
    return event[event.index(b"data: ") + 6 : -2].decode()


def client_stream(events: Iterable[bytes]) -> tuple[list[str], Any, Any]:
    """A translated stream's client side as the outcome records it, from the events the
    translation wrote: each event's data in order, the answer they reassemble to, its usage."""
    payloads = [event_payload(e) for e in events]
    asm = StreamAssembler()
    asm.feed_many(payloads)
    return payloads, asm.result(), asm.usage
