"""A system message inside a Messages request, read as the model saw it: where the recorded
server merged it into the leading system prompt (vLLM, for a template that refuses a later
system message), the row holds the merged prompt; elsewhere it stays at its place."""

from __future__ import annotations

from typing import Any

from contagent.rawlog.records import (
    ERROR_VERSION,
    INLINE_VERSION,
    ROUTE_VERSION,
    SCHEMA_VERSION,
    outcome_record,
    request_record,
    with_policy_version,
)
from contagent.wire.messages_api import normalise_exchanges

BODY = {
    "model": "m",
    "max_tokens": 9,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cch=1;"},
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": " Be brief."},
    ],
    "messages": [
        {"role": "user", "content": "fix it"},
        {"role": "system", "content": [{"type": "text", "text": "env: linux"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ],
}


def _read(server: dict[str, Any] | None) -> list[dict[str, Any]]:
    requests = {0: {"path": "/v1/messages?beta=true", "body": BODY, "server": server}}
    assert normalise_exchanges(requests, {}) == []
    return list(requests[0]["body"]["messages"])


def test_a_merging_server_gives_one_leading_system_message_as_vllm_rendered_it() -> None:
    messages = _read({"name": "vllm", "inline_system": "merged"})
    assert messages == [
        {"role": "system", "content": "You are Claude Code. Be brief.env: linux"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "ok"},
    ]


def test_elsewhere_the_system_message_stays_at_its_place() -> None:
    for server in (None, {"name": "vllm"}, {"name": "vllm", "inline_system": "in_place"}):
        roles = [m["role"] for m in _read(server)]
        assert roles == ["system", "user", "system", "assistant"]


def test_a_record_stating_it_is_written_at_the_version_that_added_it() -> None:
    base = {
        "index": 0,
        "rollout_id": "r",
        "time": 0.0,
        "method": "POST",
        "path": "/v1/messages",
        "headers": {},
        "body": {},
        "body_sha256": "",
        "body_bytes": 0,
        "stream": False,
    }
    plain = request_record(**base, server={"name": "vllm"})
    stating = request_record(**base, server={"name": "vllm", "inline_system": "merged"})
    assert (plain["schema_version"], stating["schema_version"]) == (3, INLINE_VERSION)
    assert (
        with_policy_version(request_record(**base, server={"name": "vllm"}), 1)["schema_version"]
        == 4
    )
    assert with_policy_version(stating, 1)["schema_version"] == INLINE_VERSION == 5
    routed = request_record(**base, upstream={"path": "/v1/chat/completions", "body": {}})
    assert routed["schema_version"] == ROUTE_VERSION == 6
    ends = {"index": 0, "rollout_id": "r", "started": 0.0, "ended": 0.0}
    answered = outcome_record(**ends, outcome="completed", upstream={"response": {}}, drawn={})
    refused = outcome_record(**ends, outcome="http_error", upstream={"response": {}})
    assert answered["schema_version"] == ROUTE_VERSION
    assert refused["schema_version"] == ERROR_VERSION == SCHEMA_VERSION == 7
