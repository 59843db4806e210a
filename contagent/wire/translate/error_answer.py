"""The client's error answer when the chat route answers a translated request with an error.

vLLM's chat route answers an error (status not 200) with the OpenAI error shape,
``{"error": {"message", "type", "param", "code"}}``, its status the error's ``code``. Its own
Messages route gives the same error in Anthropic's shape, ``{"type": "error", "error":
{"type", "message"}}``, keeping the status, the type and the message as they are (so the
type is vLLM's, e.g. ``BadRequestError``, not one of Anthropic's names); its own Responses
route gives the OpenAI shape unchanged. The token route answers alike, under the upstream's
status.

A body that holds no such error (not JSON, no ``error.message``: a gateway's HTML page, an
empty body) still gets an error of the client's shape, with one line naming the status and,
for a type, the client's API's own name for that status (Anthropic's documented error types;
the HTTP reason phrase, as vLLM names an error of no type of its own, for Responses).
"""

from __future__ import annotations

import http
from typing import Any

from contagent.wire.error_shapes import anthropic_error, anthropic_type, openai_error


def upstream_error(body: Any) -> tuple[str | None, str] | None:
    """(type, message) of an OpenAI-shaped error body (type None when it names none);
    None when ``body`` (parsed JSON, None when not JSON) holds no error message."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    kind = error.get("type")
    return (kind if isinstance(kind, str) else None), error["message"]


def unreadable(status: int) -> str:
    """The message of an error whose body holds none (one line naming the status)."""
    return f"the upstream answered HTTP {status} with no error message the proxy can read"


def messages_error(status: int, body: Any) -> dict[str, Any]:
    """The Messages client's error for the upstream's error ``body`` (parsed JSON, or None)."""
    read = upstream_error(body)
    fallback = anthropic_type(status)
    if read is None:
        return anthropic_error(fallback, unreadable(status))
    kind, message = read
    return anthropic_error(kind or fallback, message)


def responses_error(status: int, body: Any) -> dict[str, Any]:
    """The Responses client's error for the upstream's error ``body``: the body itself when it
    holds an error (the shape is the same), else one of that shape."""
    if upstream_error(body) is not None:
        assert isinstance(body, dict)
        return body
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return openai_error(status, phrase, unreadable(status))
