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

#: Anthropic's documented error type of each status it names
ANTHROPIC_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    """An error body in Anthropic's shape."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def openai_error(status: int, kind: str, message: str) -> dict[str, Any]:
    """An error body in the OpenAI shape, as vLLM writes it."""
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def upstream_error(body: Any) -> tuple[str | None, str] | None:
    """(type, message) of an OpenAI-shaped error body (type None when it names none);
    None when ``body`` (parsed JSON, None when not JSON) holds no error message."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        return None
    kind = error.get("type") if isinstance(error, dict) else None
    return (kind if isinstance(kind, str) else None), message


def unreadable(status: int) -> str:
    """The message of an error whose body holds none (one line naming the status)."""
    return f"the upstream answered HTTP {status} with no error message the proxy can read"


def messages_error(status: int, body: Any) -> dict[str, Any]:
    """The Messages client's error for the upstream's error ``body`` (parsed JSON, or None)."""
    read = upstream_error(body)
    fallback = ANTHROPIC_TYPES.get(
        status, "api_error" if status >= 500 else "invalid_request_error"
    )
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
