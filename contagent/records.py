"""The raw exchange log: the contract between the recording proxy and the exporter.

A rollout's ``exchanges.jsonl`` holds two kinds of line, both JSON objects:

* a :class:`RequestRecord`, appended *before* the request is forwarded upstream;
* an :class:`OutcomeRecord` with the same ``index``, appended when the exchange
  ends, whichever way it ends.

Indices are dense, 0-based and assigned in arrival order per rollout. A request
without an outcome is what a crash leaves behind. Secrets never appear: the
proxy drops ``Authorization``, ``api-key`` and cookie headers before recording.

``result.json`` beside the log (written by ``contagent run``) is a
:class:`RolloutResult`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1

Outcome = Literal["completed", "incomplete", "http_error", "upstream_error", "abandoned"]
OUTCOMES: tuple[str, ...] = ("completed", "incomplete", "http_error", "upstream_error", "abandoned")

#: Request headers that may be recorded (lower-case). Everything else is dropped,
#: so a new secret-bearing header can never leak by default.
SAFE_HEADERS: frozenset[str] = frozenset(
    {
        "content-type",
        "accept",
        "user-agent",
        "x-stainless-retry-count",
        "x-stainless-read-timeout",
        "x-stainless-lang",
        "x-stainless-package-version",
        "x-stainless-runtime",
        "x-stainless-runtime-version",
        "x-stainless-os",
        "x-stainless-arch",
        "x-stainless-async",
        "x-litellm-session-id",
        "x-request-id",
        "http-referer",
        "x-title",
        "openai-beta",
    }
)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="Raw log format version.")
    index: int = Field(ge=0, description="Dense 0-based per-rollout index, in arrival order.")
    rollout_id: str = Field(description="The rollout this exchange belongs to.")


class RequestRecord(_Record):
    """What the client sent, written before anything is forwarded."""

    type: Literal["request"] = "request"
    time: float = Field(description="Unix time (s) the proxy received the request.")
    method: str = Field(description="HTTP method, e.g. POST.")
    path: str = Field(description="Upstream path with query, e.g. /v1/chat/completions.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Safe request headers only (lower-case names); never credentials.",
    )
    body: Any = Field(
        None,
        description="The request body as sent on the wire, parsed as JSON with key order kept; "
        "null when the body is empty or not JSON (see body_text).",
    )
    body_text: str | None = Field(
        None, description="The raw body (UTF-8, errors replaced) when it is not JSON."
    )
    body_sha256: str = Field(description="SHA-256 of the exact request body bytes received.")
    body_bytes: int = Field(ge=0, description="Length of the request body in bytes.")
    stream: bool = Field(False, description="The client asked for a streamed (SSE) response.")
    upstream_changes: list[str] = Field(
        default_factory=list,
        description="Changes the proxy made to the forwarded body, e.g. "
        "'stream_options.include_usage' when it asked the upstream for stream usage.",
    )


class OutcomeRecord(_Record):
    """How the exchange ended."""

    type: Literal["outcome"] = "outcome"
    outcome: Outcome = Field(description="How the exchange ended.")
    status: int | None = Field(
        None, description="Upstream HTTP status; null when no upstream response arrived."
    )
    client_status: int | None = Field(
        None, description="HTTP status the proxy sent to the client (502/504 for upstream faults)."
    )
    started: float = Field(description="Unix time (s) the request was forwarded.")
    first_byte: float | None = Field(None, description="Unix time of the first response byte.")
    ended: float = Field(description="Unix time (s) the exchange ended.")
    response: Any = Field(
        None,
        description="The response body parsed as JSON; for streams, the reassembled "
        "completion object (chat.completion shape with the joined message).",
    )
    response_text: str | None = Field(
        None, description="The raw response body when it is not valid JSON."
    )
    stream_events: list[str] | None = Field(
        None, description="For streams: each SSE data payload exactly as received, in order."
    )
    usage: dict[str, Any] | None = Field(None, description="Token usage reported by the server.")
    finish_reasons: list[str | None] = Field(
        default_factory=list, description="finish_reason of each choice, in choice order."
    )
    error: str | None = Field(None, description="What went wrong, for non-completed outcomes.")


RolloutStatus = Literal["passed", "failed", "agent_error", "timeout", "infra_error"]


class RolloutResult(BaseModel):
    """``result.json``: what the runner knows about a rollout's outcome."""

    model_config = ConfigDict(extra="allow")

    schema_version: Literal[1] = SCHEMA_VERSION
    rollout_id: str
    experiment: str | None = None
    model: str | None = None
    status: RolloutStatus | None = Field(None, description="Overall verdict of the rollout.")
    passed: bool | None = None
    reward: float | None = None
    stop_condition: str | None = Field(
        None,
        description="Why the agent stopped: finished, max_iterations, timeout, error, stuck, ...",
    )
    started: float | None = None
    ended: float | None = None
    duration_s: float | None = None
