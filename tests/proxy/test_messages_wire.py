"""The Anthropic Messages API through the proxy at the wire, as Claude Code sends it: a
streamed request that says ``Accept: application/json``, ``?beta=true``, the
``anthropic-*`` headers and an ``x-api-key``. A raw socket client, the proxy, and a raw
upstream that keeps the bytes it received."""

from __future__ import annotations

import orjson
import pytest

from contagent.errors import ContagentError
from contagent.proxy import RecordingProxy
from tests.proxy.helpers import (
    CLIENT_KEY,
    UPSTREAM_KEY,
    dechunk,
    exchanges,
    raw_address,
    raw_exchange,
)
from tests.proxy.upstreams import RawUpstream

BETAS = "claude-code-20250219,interleaved-thinking-2025-05-14"
BODY = orjson.dumps({
    "model": "m", "max_tokens": 32000, "stream": True,
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
})  # fmt: skip
_EVENTS = [
    ("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 0}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "text_delta", "text": "hello"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                       "usage": {"output_tokens": 1}}),
    ("message_stop", {"type": "message_stop"}),
]  # fmt: skip
STREAM = b"".join(b"event: %s\ndata: %s\n\n" % (n.encode(), orjson.dumps(d)) for n, d in _EVENTS)
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (
    len(STREAM),
    STREAM,
)


def _claude_code_request(proxy, extra: bytes = b"") -> bytes:
    _, _, path = raw_address(proxy)  # .../r/r1/v1
    return (
        b"POST %s/messages?beta=true HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Accept: application/json\r\nanthropic-version: 2023-06-01\r\nanthropic-beta: %s\r\n"
        b"x-api-key: %s\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (path.encode(), BETAS.encode(), CLIENT_KEY.encode(), extra, len(BODY), BODY)
    )


def _head_lines(request: bytes) -> list[bytes]:
    return request.partition(b"\r\n\r\n")[0].split(b"\r\n")


def test_a_claude_code_request_is_forwarded_and_recorded_as_a_stream(
    upstream, proxy_factory, tmp_path
):
    up = upstream(RawUpstream(ANSWER))
    proxy = proxy_factory(up.url)
    raw = raw_exchange(proxy, _claude_code_request(proxy))

    [sent] = up.requests
    lines = _head_lines(sent)
    assert lines[0] == b"POST /v1/messages?beta=true HTTP/1.1", "the query string is kept"
    assert b"anthropic-version: 2023-06-01" in lines
    assert b"anthropic-beta: " + BETAS.encode() in lines
    assert b"Accept: application/json" in lines
    assert f"Authorization: Bearer {UPSTREAM_KEY}".encode() in lines, "the header vLLM checks"
    assert not [x for x in lines if x.lower().startswith(b"x-api-key")]
    assert CLIENT_KEY.encode() not in sent
    assert sent.endswith(b"\r\n\r\n" + BODY), "the body goes up as the client sent it"

    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Transfer-Encoding: chunked" in head
    assert dechunk(body) == STREAM, "relayed as a stream whatever the Accept header said"

    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["path"] == "/v1/messages?beta=true" and req["stream"] is True
    assert req["headers"]["anthropic-version"] == "2023-06-01"
    assert req["headers"]["anthropic-beta"] == BETAS
    assert req["headers"]["accept"] == "application/json"
    assert out is not None and out["stream_events"] == [
        orjson.dumps(d).decode() for _, d in _EVENTS
    ]
    log = (tmp_path / "records" / "r1" / "exchanges.jsonl").read_bytes()
    for secret in (CLIENT_KEY, UPSTREAM_KEY):
        assert secret.encode() not in log


def test_an_upstream_that_wants_x_api_key_gets_the_key_there(upstream, proxy_factory, tmp_path):
    up = upstream(RawUpstream(ANSWER))
    proxy = proxy_factory(up.url, upstream_auth_header="x-api-key")
    client_auth = b"Authorization: Bearer %s\r\n" % CLIENT_KEY.encode()
    raw = raw_exchange(proxy, _claude_code_request(proxy, client_auth))
    assert raw.startswith(b"HTTP/1.1 200 ")
    [sent] = up.requests
    lines = _head_lines(sent)
    assert [x for x in lines if x.lower().startswith(b"x-api-key")] == [
        b"x-api-key: " + UPSTREAM_KEY.encode()
    ], "the proxy's key, once; the client's is dropped"
    assert not [x for x in lines if x.lower().startswith(b"authorization")]
    assert CLIENT_KEY.encode() not in sent
    log = (tmp_path / "records" / "r1" / "exchanges.jsonl").read_bytes()
    assert UPSTREAM_KEY.encode() not in log and CLIENT_KEY.encode() not in log


def test_a_custom_auth_header_the_client_also_sends_is_not_forwarded(upstream, proxy_factory):
    up = upstream(RawUpstream(ANSWER))
    proxy = proxy_factory(up.url, upstream_auth_header="X-Goog-Api-Key")
    theirs = b"x-goog-api-key: %s\r\n" % CLIENT_KEY.encode()
    raw_exchange(proxy, _claude_code_request(proxy, theirs))
    [sent] = up.requests
    assert b"X-Goog-Api-Key: " + UPSTREAM_KEY.encode() in _head_lines(sent)
    assert CLIENT_KEY.encode() not in sent


@pytest.mark.parametrize(
    "name", ["Content-Length", "Host", "Connection", "x-title", "anthropic-version", "bad name", ""]
)
def test_an_auth_header_the_proxy_frames_or_records_is_refused(name, tmp_path):
    with pytest.raises(ContagentError, match="upstream auth header"):
        RecordingProxy("http://127.0.0.1:9", tmp_path, upstream_api_key="k",
                       upstream_auth_header=name)  # fmt: skip


def test_an_upstream_key_with_a_line_break_is_refused(tmp_path):
    with pytest.raises(ContagentError, match="one line"):
        RecordingProxy("http://127.0.0.1:9", tmp_path, upstream_api_key="k\r\nX-Evil: 1")
