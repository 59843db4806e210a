"""What the proxy changes in a request body it forwards, and the record of each change.

Every change is one entry of the request record's ``upstream_changes``; the recorded body is
always the client's. A request nothing is added to goes up as the client's bytes.

- ``stream_options.include_usage`` on a stream that did not ask for usage, of an API whose
  streams report it only when asked (:attr:`contagent.wire.WireApi.usage_on_request`);
- ``return_token_ids``, ``logprobs``, ``top_logprobs`` when token data is recorded, on an API
  whose server returns it (:mod:`contagent.proxy.tokens`);
- ``sampling.<key>`` for each value ``--sampling-override`` / ``--sampling-defaults`` set
  (:mod:`contagent.proxy.sampling_options`), with the effective sampling of every generation request;
- ``chat_template`` with ``--chat-template`` where the client sent none, on an API that
  takes one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contagent import wire
from contagent.proxy.sampling_options import SamplingPolicy, generation_route
from contagent.proxy.tokens import TokenAsk, ask_for_tokens


@dataclass
class Rewrite:
    """The body changes one proxy makes (the same for every rollout it serves)."""

    tokens: bool = False
    sampling: SamplingPolicy = field(default_factory=SamplingPolicy)
    #: the chat template sent with every chat request that has none (``--chat-template``)
    chat_template: str | None = None


@dataclass
class Changed:
    """What :func:`change` made of one request body."""

    #: the body to send instead, None: the client's bytes go up as they came
    body: Any = None
    #: the ``upstream_changes`` entries
    changes: list[str] = field(default_factory=list)
    #: the token data asked for, None: none
    ask: TokenAsk | None = None
    #: the request record's ``sampling``, None: not a generation request
    sampling: dict[str, Any] | None = None


def change(parsed: Any, route: str, stream: bool, rewrite: Rewrite) -> Changed:
    """The changes ``rewrite`` makes to one request body (``route``: its path, no query)."""
    out = Changed()
    if not isinstance(parsed, dict):
        return out
    body: dict[str, Any] = parsed
    api = wire.for_route(route)
    if api is None:
        return out
    if stream and api.usage_on_request:
        opts = body.get("stream_options")
        if not (isinstance(opts, dict) and opts.get("include_usage") is True):
            body = {**body, "stream_options": {**(opts if isinstance(opts, dict) else {})}}
            body["stream_options"]["include_usage"] = True
            out.changes.append("stream_options.include_usage")
    gen = generation_route(route)
    if gen is not None:
        sent, changes, out.sampling = rewrite.sampling.apply(body, gen)
        if sent is not None:
            body = sent
        out.changes.extend(changes)
    if api.chat_template and rewrite.chat_template is not None:
        if body.get("chat_template") is None:
            body = {**body, "chat_template": rewrite.chat_template}
            out.changes.append("chat_template")
    if api.tokens and rewrite.tokens:
        body, out.ask = ask_for_tokens(body)
        out.changes.extend(out.ask.added)
    if out.changes:
        out.body = body
    return out
