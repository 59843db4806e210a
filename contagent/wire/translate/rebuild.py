"""Is a translated exchange's client side the translation of its upstream side? (pure)

The token route records both sides of an exchange it served from chat completions: the
client's request and answer, and the chat request and answer (``upstream``), with the values
the translation drew at random (``drawn``). Running the same translation again over the
recorded chat answer, with those values, must give exactly the answer the client got, and
the client's request must translate to exactly the chat request sent (and a stream's
recorded response must be its events reassembled). An upstream error answer likewise: the
client's error must be the translation of the recorded upstream error, under its status
(:mod:`contagent.wire.translate.error_answer`). The raw log's reader
asks this of every translated exchange, for the exporter and the validator alike, so an
exchange whose two sides disagree (a record changed, a translation changed since) makes its
rollout not training-ready (``translation_mismatch``), naming the exchange.
"""

from __future__ import annotations

from typing import Any

import orjson

from contagent import wire
from contagent.rawlog.records import ERROR_VERSION
from contagent.wire.translate import Untranslatable
from contagent.wire.translate.via_chat import (
    ANSWER_FAULTS,
    TABLE,
    Drawn,
    TemplateDecisions,
    ViaChat,
    client_stream,
)

#: the not-ready kind of an exchange whose client side is not the translation of its upstream
PROBLEM = "translation_mismatch"
#: outcomes whose answer a row may keep, and so must be sound (an error answer is checked too)
_KEPT = frozenset({"completed", "incomplete"})
_FAULTS = (Untranslatable, *ANSWER_FAULTS)


def translation_problems(
    requests: dict[int, dict[str, Any]], outcomes: dict[int, dict[str, Any]]
) -> list[tuple[str, str]]:
    """(kind, text) for each translated exchange with an answer whose sides disagree."""
    found = []
    for index in sorted(requests):
        request = requests[index]
        outcome = outcomes.get(index)
        if not isinstance(request.get("upstream"), dict) or outcome is None:
            continue
        if outcome.get("outcome") not in _KEPT and not _error_answer(outcome):
            continue
        why = mismatch(request, outcome)
        if why is not None:
            found.append((PROBLEM, f"exchange {index}: {why}"))
    return found


def _error_answer(outcome: dict[str, Any]) -> bool:
    """The outcome is the upstream's error answer, made the client's (from log version 7;
    before, the client got the upstream's as it was, and the log holds no upstream side)."""
    if outcome.get("outcome") != "http_error" or outcome.get("status") is None:
        return False  # a refusal: nothing went upstream
    version = outcome.get("schema_version", 1)
    return "upstream" in outcome or (isinstance(version, int) and version >= ERROR_VERSION)


def _chunk(payload: Any) -> Any:
    """A recorded chat stream payload as the proxy fed it to the translation."""
    if not isinstance(payload, str) or wire.adapter("chat").is_end_event(payload):
        return payload  # the end marker goes to the translation as it is
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload


def mismatch(request: dict[str, Any], outcome: dict[str, Any]) -> str | None:
    """Why a translated exchange's records disagree, or None when they agree."""
    api = wire.for_path(request.get("path"))
    via = TABLE.get(api.name) if api is not None else None
    if via is None:
        return f"route {request.get('path')!r} is not one the proxy translates"
    body = request.get("body")
    try:
        chat = via.request(body, TemplateDecisions.of_server(request.get("server")))
    except Untranslatable as exc:
        return f"the client's request does not translate ({exc})"
    if chat != request["upstream"].get("body"):
        return "the chat request sent upstream is not the translation of the client's"
    if outcome.get("outcome") == "http_error":
        return _error_mismatch(via, outcome)
    answer = outcome.get("upstream")
    if not isinstance(answer, dict) or not isinstance(body, dict):
        return "no upstream answer is recorded"
    response = answer.get("response")
    recorded = outcome.get("drawn") or {}
    drawn = Drawn(recorded)
    try:
        maker = via.client(body, drawn, request.get("server"), request.get("sampling"))
        events = answer.get("stream_events")
        if isinstance(events, list):  # the upstream streamed: so did the client's answer
            rebuilt, whole, _ = client_stream(e for p in events for e in maker.events(_chunk(p)))
            same = rebuilt == outcome.get("stream_events") and whole == outcome.get("response")
        else:
            if not isinstance(response, dict):
                return "no upstream answer is recorded"
            same = maker.reply(response) == outcome.get("response")
    except _FAULTS as exc:
        return f"the upstream answer does not translate ({type(exc).__name__}: {exc})"
    if not same:
        return "the client's answer is not the translation of the upstream answer"
    if drawn.values != recorded:
        return "the recorded drawn values are not those the answer holds"
    return None


def _error_mismatch(via: ViaChat, outcome: dict[str, Any]) -> str | None:
    """Why the client's error is not the translation of the upstream's, or None."""
    answer = outcome.get("upstream")
    if not isinstance(answer, dict):
        return "no upstream error answer is recorded"
    status = outcome.get("status")
    if outcome.get("client_status") != status:
        return (
            f"the client got status {outcome.get('client_status')}, the upstream answered {status}"
        )
    if not isinstance(status, int) or via.error(status, answer.get("response")) != outcome.get(
        "response"
    ):
        return "the client's error is not the translation of the upstream's error"
    return None
