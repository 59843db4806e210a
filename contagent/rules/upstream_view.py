"""Which exchange a step's token data belongs to (a pure rule: the exporter and the validator
both read a step's token data through it, so they never disagree).

An exchange the proxy served from chat completions (the token route: a Messages or
Responses request sent upstream as a chat request) is recorded with both sides: the client's
request and answer on top, as every reader of the conversation expects, and the chat
request and answer in ``upstream``. The token data is the chat exchange's, so the token rules
read it as a chat rollout's exchange: the chat request's path and body, its sampling, and
the chat answer with its usage and stream. Every other exchange is read as recorded.
"""

from __future__ import annotations

from typing import Any

from contagent.rawlog.records import UPSTREAM_ANSWER_FIELDS


def translated(request: dict[str, Any]) -> bool:
    """Was this exchange served from chat completions (the token route)?"""
    return isinstance(request.get("upstream"), dict)


def token_exchange(
    request: dict[str, Any], outcome: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(request, outcome) as the chat exchange the token data came from: the records
    themselves, unless the exchange was translated."""
    up = request.get("upstream")
    if not isinstance(up, dict):
        return request, outcome
    view = {k: v for k, v in request.items() if k not in ("upstream", "api")}
    view["path"], view["body"] = up.get("path"), up.get("body")
    answer = outcome.get("upstream")
    out = dict(outcome)
    for name in UPSTREAM_ANSWER_FIELDS:
        out[name] = answer.get(name) if isinstance(answer, dict) else None
    return view, out
