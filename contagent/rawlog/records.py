"""The raw exchange log: the contract between the recording proxy and the exporter.

A rollout's ``exchanges.jsonl`` holds two kinds of line, both JSON objects:

* a :class:`RequestRecord`, appended *before* the request is forwarded upstream;
* an :class:`OutcomeRecord` with the same ``index``, appended when the exchange
  ends, whichever way it ends.

Indices are dense, 0-based and assigned in arrival order per rollout. A request
without an outcome is what a crash leaves behind. Secrets never appear: only
the headers in :data:`SAFE_HEADERS` are recorded, so ``Authorization``,
``api-key``, ``x-api-key`` and cookies never are.

``result.json`` beside the log (written by ``contagent run``) is a
:class:`~contagent.rawlog.result.RolloutResult`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from contagent import wire
from contagent.model_schema import dict_builder
from contagent.versions import version_field

#: The raw exchange log's version (request and outcome records); 2 added ``tokens`` and
#: ``server``, 3 the server's ``logprobs_mode`` and the request's ``sampling``, 4
#: ``policy_version``, 5 the server's ``inline_system``, 6 the token route's ``upstream``
#: (request and outcome) and ``drawn``, and the server's ``thinking_off_effort`` and
#: ``max_model_len``, 7 the token route's error answers (``upstream`` on an ``http_error``
#: outcome, and its ``response_text``). A record is written at the lowest version that holds
#: its fields (:func:`with_policy_version`), so a log recorded without versions reads as it
#: always did.
SCHEMA_VERSION = 7
#: The version of a record that carries no field added after it.
BASE_VERSION = 3
#: The version that added ``policy_version``.
POLICY_VERSION = 4
#: The version that added ``inline_system``.
INLINE_VERSION = 5
#: The version that added the token route's fields and the server's template probes.
ROUTE_VERSION = 6
#: The version that added the token route's error answers.
ERROR_VERSION = 7

LogprobsMode = Literal["raw_logprobs", "processed_logprobs"]
InlineSystem = Literal["merged", "in_place"]
LOGPROBS_MODES: tuple[str, ...] = get_args(LogprobsMode)

Outcome = Literal["completed", "incomplete", "http_error", "upstream_error", "abandoned"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)

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
        "anthropic-version",
        "anthropic-beta",
    }
)


class ServerInfo(BaseModel):
    """Which inference server answered, as the proxy found out at start."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(description="The server's kind, e.g. vllm.")
    version: str | None = Field(None, description="The version it reports, e.g. 0.32.0.")
    logprobs_mode: LogprobsMode | None = Field(
        None,
        description="What the logprobs it reports describe: raw_logprobs (the model's own, "
        "before temperature and processors) or processed_logprobs (the distribution sampled "
        "from); null when unknown (not probed, or the probe could not tell).",
    )
    logprobs_mode_how: str | None = Field(
        None, description="One line on how logprobs_mode was decided, or why it is unknown."
    )
    inline_system: InlineSystem | None = Field(
        None,
        description="How the server's Messages route renders a system message inside "
        "messages, as the proxy probed its template: merged (appended to the leading system "
        "prompt, because the template refuses a system message after the first turn) or "
        "in_place; absent or null when unknown. Written at log version 5.",
    )
    thinking_off_effort: str | None = Field(
        None,
        description="The reasoning_effort the server's Messages route sends for thinking "
        "disabled, as the proxy probed its template: none, or low for a template that cannot "
        "turn thinking off; absent or null when unknown. Written at log version 6.",
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="The served model's context length (its model list's max_model_len); "
        "absent or null when unknown. Written at log version 6.",
    )


SamplingSource = Literal["override", "client", "defaults", "server"]
SAMPLING_SOURCES: tuple[str, ...] = get_args(SamplingSource)
#: the sampling parameters a request record gives, in this order
SAMPLING_KEYS: tuple[str, ...] = (
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "logit_bias", "seed", "max_tokens",
)  # fmt: skip


class SamplingValue(BaseModel):
    """One effective sampling parameter of a request, and where its value came from."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    value: Any = Field(
        description="The value the server sampled with (logit_bias: whether one was sent; "
        "seed null: unseeded)."
    )
    source: SamplingSource = Field(
        description="override (--sampling-override), client (the request), defaults "
        "(--sampling-defaults) or server (the server's own default)."
    )


class Sampling(BaseModel):
    """A request's effective sampling parameters; each null where it is not known."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    temperature: SamplingValue | None
    top_p: SamplingValue | None
    top_k: SamplingValue | None
    min_p: SamplingValue | None
    presence_penalty: SamplingValue | None
    frequency_penalty: SamplingValue | None
    repetition_penalty: SamplingValue | None
    logit_bias: SamplingValue | None
    seed: SamplingValue | None
    max_tokens: SamplingValue | None


class ChoiceTokens(BaseModel):
    """The token data of one choice, as the server reported it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    index: int = Field(ge=0, description="The choice's index (n > 1 gives several).")
    token_ids: list[int] = Field(
        description="The sampled token ids, in order (a stream's concatenated over its chunks)."
    )
    logprobs: list[float] | None = Field(
        description="The sampler's logprob of each of token_ids (logprobs.content[].logprob); "
        "null when the server reported none."
    )


class ExchangeTokens(BaseModel):
    """Token data of a chat completion: prompt ids and each choice's sampled ids."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    prompt_token_ids: list[int] | None = Field(
        description="The prompt after the chat template; null when the server reported none."
    )
    choices: list[ChoiceTokens] = Field(description="Per choice, in index order.")


class UpstreamRequest(BaseModel):
    """The request the token route sent upstream in the client's stead."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    path: str = Field(description="The upstream path, the chat-completions route.")
    body: Any = Field(
        description="The chat-completions body the translation made of the client's body, "
        "before the changes listed in the request's upstream_changes."
    )


class UpstreamAnswer(BaseModel):
    """What the upstream answered a translated request, as received."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    response: Any = Field(
        None,
        description="The chat completion (a stream's reassembled from its chunks), or the "
        "error body of an http_error outcome, parsed as JSON; null when none arrived or it is "
        "not JSON (see response_text).",
    )
    response_text: str | None = Field(
        None,
        description="An http_error outcome's raw error body when it is not valid JSON. Written "
        "at log version 7.",
    )
    stream_events: list[str] | None = Field(
        None, description="For streams: each SSE data payload as received, in order."
    )
    usage: dict[str, Any] | None = Field(None, description="The chat usage the server reported.")
    finish_reasons: list[str | None] = Field(
        default_factory=list, description="finish_reason of each choice, in choice order."
    )


#: an upstream answer's fields, in the order recorded
UPSTREAM_ANSWER_FIELDS: tuple[str, ...] = tuple(UpstreamAnswer.model_fields)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    schema_version: int = version_field(SCHEMA_VERSION, "Raw log")
    index: int = Field(ge=0, description="Dense 0-based per-rollout index, in arrival order.")
    rollout_id: str = Field(description="The rollout this exchange belongs to.")


class RequestRecord(_Record):
    """What the client sent, written before anything is forwarded."""

    type: Literal["request"] = "request"
    time: float = Field(description="Unix time (s) the proxy received the request.")
    method: str = Field(description="HTTP method, e.g. POST.")
    path: str = Field(description="Upstream path with query, as the client sent it.")
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
        description="Changes the proxy made to the forwarded body, one entry per field it "
        "added: 'stream_options.include_usage' when it asked the upstream for stream usage; "
        "'return_token_ids', 'logprobs', 'top_logprobs' when it asked for token data; "
        "'sampling.<key>' for each sampling parameter it set (--sampling-override, "
        "--sampling-defaults); 'chat_template' when it sent --chat-template.",
    )
    server: ServerInfo | None = Field(
        None, description="The server the proxy forwards to, when it knows which it is."
    )
    sampling: Sampling | None = Field(
        None,
        description="The effective sampling parameters of a generation request (chat "
        "completions, completions, responses, messages); null on other routes.",
    )
    policy_version: int | None = Field(
        None,
        ge=0,
        description="The policy version current when the request went upstream (a rollout "
        "engine's proxy only; absent otherwise).",
    )
    upstream: UpstreamRequest | None = Field(
        None,
        description="The token route: a Messages or Responses request the proxy sent "
        "upstream as this chat-completions request (body and path above are the client's); "
        "absent when it went up as sent. Written at log version 6.",
    )


def completeness(status: int | None, response: Any) -> tuple[bool, str | None]:
    """Is a response complete?  Returns ``(completed, why_not)``: an outcome record's
    ``completed`` or ``incomplete``, and the exporter's reading of it.

    Complete means HTTP 200, a parseable body, and a body its API's adapter judges
    complete (:meth:`contagent.wire.WireApi.judge`, asked in table order): the model ended
    its turn on its own. Echoed request settings such as ``truncation: "disabled"`` are
    settings, not truncation. A body no adapter knows is complete only when it holds
    ``data`` (a listing such as the models route's, which is no generation).
    """
    if status != 200:
        return False, f"http status {status}"
    if not isinstance(response, dict):
        return False, "response body is not a JSON object"
    for api in wire.adapters():
        verdict = api.judge(response)
        if verdict is not None:
            return verdict
    if "data" in response:
        return True, None
    return False, "neither choices nor output in response"


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
    tokens: ExchangeTokens | None = Field(
        None,
        description="Token ids and logprobs the server reported, counts as reported (the "
        "exporter judges them); null or absent when the proxy did not record token data.",
    )
    policy_version: int | None = Field(
        None,
        ge=0,
        description="The policy version current when the exchange ended (a rollout engine's "
        "proxy only; absent otherwise).",
    )
    upstream: UpstreamAnswer | None = Field(
        None,
        description="The token route: the chat answer the client's answer (response, "
        "stream_events, usage above) was translated from; tokens are this answer's. On an "
        "http_error outcome, the upstream's error answer (status above) the client's error "
        "(response, client_status) was made from (from log version 7). Absent when the "
        "exchange was not translated, or no upstream answer arrived. Written at log version 6.",
    )
    drawn: dict[str, list[Any]] | None = Field(
        None,
        description="The token route: the values the translation drew at random (kind -> "
        "values in the order drawn: signature, response_id, created_at, id), so that the "
        "client's answer can be rebuilt exactly. Written at log version 6.",
    )


# Records as plain dicts, for the proxy's hot path and the test helpers alike: keywords in,
# the model's fields out in its order, read from the model once, at import (a test
# validates them against the models).


def _lowest_version(record: dict[str, Any]) -> int:
    """The lowest log version that holds a record without ``policy_version``."""
    if record.get("upstream") is not None and record.get("outcome") == "http_error":
        return ERROR_VERSION
    if record.get("upstream") is not None or record.get("drawn") is not None:
        return ROUTE_VERSION
    server = record.get("server")
    if isinstance(server, dict):
        if server.get("thinking_off_effort") is not None or server.get("max_model_len"):
            return ROUTE_VERSION
        if server.get("inline_system") is not None:
            return INLINE_VERSION
    return BASE_VERSION


def _without_policy(build: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """``build``, its records written at the version before ``policy_version`` and without
    that field: :func:`with_policy_version` adds both where a version is known."""

    def unversioned(**fields: Any) -> dict[str, Any]:
        record = build(**fields)
        del record["policy_version"]
        for name in _ROUTE_FIELDS:  # the token route's, absent from every other record
            if name in record and record[name] is None:
                del record[name]
        record["schema_version"] = _lowest_version(record)
        return record

    unversioned.__doc__ = build.__doc__
    return unversioned


#: fields only the token route writes
_ROUTE_FIELDS = ("upstream", "drawn")

request_record = _without_policy(dict_builder(RequestRecord))
outcome_record = _without_policy(dict_builder(OutcomeRecord))


def with_policy_version(record: dict[str, Any], version: int) -> dict[str, Any]:
    """``record`` (either kind) stamped with a policy version, at the log version that
    added the field."""
    record["schema_version"] = max(_lowest_version(record), POLICY_VERSION)
    record["policy_version"] = version
    return record
