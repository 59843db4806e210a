"""The error shapes of the wire APIs: the one home of what an error looks like to each client.

The OpenAI APIs (chat completions, completions, Responses) answer an error with
``{"error": {"message", "type", "code"}}``; Anthropic's Messages API with ``{"type": "error",
"error": {"type", "message"}}``, its type one of Anthropic's documented names for the status.
Mid-stream, after a ``200`` head went out, an error is an event of the stream: a bare
``data: {"error": ...}`` on the chat routes (which the openai SDK raises on), an ``event:
error`` whose data is the Messages error body on Messages (as Anthropic and vLLM's own
Messages route send it, which the anthropic SDK raises on), and the Responses API's ``error``
event (``{"type": "error", "code", "message", "param", "sequence_number"}``) on Responses.

Each adapter answers with these builders (:meth:`contagent.wire.WireApi.error_body`,
:meth:`~contagent.wire.WireApi.error_event`); the token route's translation of an upstream
error (:mod:`contagent.wire.translate.error_answer`) builds its bodies here too.
"""

from __future__ import annotations

from typing import Any

import orjson

#: Anthropic's documented error type of each status it names
ANTHROPIC_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_type(status: int) -> str:
    """Anthropic's error type for ``status``: its documented one, else ``api_error`` for a
    server error and ``invalid_request_error`` for a client error."""
    return ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    """An error body in Anthropic's shape."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def openai_error(status: int, kind: str, message: str) -> dict[str, Any]:
    """An error body in the OpenAI shape, as vLLM writes it (with ``param``)."""
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def proxy_error(status: int, message: str, kind: str) -> bytes:
    """An error the proxy itself answers, in the OpenAI shape (``kind``: its ``type``)."""
    return orjson.dumps({"error": {"message": message, "type": kind, "code": status}})


def proxy_error_event(status: int, message: str, kind: str) -> bytes:
    """The chat routes' mid-stream error: a bare data line holding the OpenAI error body."""
    return b"data: " + proxy_error(status, message, kind) + b"\n\n"


def messages_proxy_error(status: int, message: str) -> bytes:
    """An error the proxy itself answers a Messages client, typed by its status."""
    return orjson.dumps(anthropic_error(anthropic_type(status), message))


def messages_error_event(status: int, message: str) -> bytes:
    """A Messages stream's error event."""
    return b"event: error\ndata: " + messages_proxy_error(status, message) + b"\n\n"


def responses_error_event(message: str, kind: str, sent: int) -> bytes:
    """A Responses stream's ``error`` event, numbered after the ``sent`` events before it
    (a Responses stream numbers its events from 0)."""
    event = {"type": "error", "code": kind, "message": message, "param": None,
             "sequence_number": sent}  # fmt: skip
    return b"event: error\ndata: " + orjson.dumps(event) + b"\n\n"
