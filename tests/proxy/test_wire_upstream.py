"""The upstream side's HTTP/1.1 rules at the wire: interim answers, codings, framing,
hop-by-hop headers, HEAD, and a timeout that measures the upstream's silence only."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import orjson
import pytest

from contagent.proxy.http1 import redact_query
from tests.proxy.wire import Relay, on_loop

COMPLETION = orjson.dumps({
    "id": "c", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
})  # fmt: skip


def answer(body: bytes, extra: bytes = b"", status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status,
        len(body),
        extra,
        body,
    )


def sse(*events: bytes) -> bytes:
    return b"".join(b"data: %s\n\n" % e for e in events)


CHUNK = orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
    "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]})  # fmt: skip


@on_loop
async def test_interim_1xx_answers_are_skipped_and_the_final_one_relayed():
    relay = Relay()
    relay.feed(b"HTTP/1.1 100 Continue\r\n\r\n")
    relay.feed(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
    relay.feed(answer(COMPLETION))
    head, body = relay.sent()
    assert head.startswith(b"HTTP/1.1 200 OK") and body == COMPLETION
    assert relay.outcome()["outcome"] == "completed" and relay.outcome()["status"] == 200


@on_loop
async def test_a_paused_upstream_is_not_timed_out_while_the_client_is_slow():
    relay = Relay(read_timeout=0.05)
    relay.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
    relay.client.pause_writing()  # the client stops reading: the upstream read is paused
    assert not relay.up_t.reading
    await asyncio.sleep(0.2)  # longer than the timeout: the silence is the proxy's, not upstream's
    assert relay.host.records == [], relay.host.records
    relay.client.resume_writing()
    payload = sse(CHUNK, b"[DONE]")
    relay.feed(b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload))
    assert relay.outcome()["outcome"] == "completed"


@on_loop
async def test_a_silent_upstream_is_still_timed_out():
    relay = Relay(read_timeout=0.05)
    relay.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
    await asyncio.sleep(0.2)
    assert relay.outcome()["outcome"] == "upstream_error"
    assert "timed out" in relay.outcome()["error"]


@on_loop
async def test_content_type_is_matched_case_insensitively():
    relay = Relay()
    payload = sse(CHUNK, b"[DONE]")
    relay.feed(b"HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream; charset=UTF-8\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))  # fmt: skip
    head, body = relay.sent()
    assert b"transfer-encoding: chunked" in head.lower() and body == payload
    out = relay.outcome()
    assert out["outcome"] == "completed" and out["stream_events"][-1] == "[DONE]"


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


def _encoders() -> dict[str, object]:
    out: dict[str, object] = {
        "gzip": gzip.compress,
        "deflate": zlib.compress,  # zlib-wrapped, as RFC 9110 says
        "deflate-raw": _raw_deflate,  # raw, as some servers send it
    }
    try:
        import brotli

        out["br"] = brotli.compress
    except ImportError:
        pass
    try:
        import zstandard

        out["zstd"] = zstandard.ZstdCompressor().compress
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("coding", ["gzip", "deflate", "deflate-raw", "br", "zstd"])
@on_loop
async def test_content_codings_are_decoded_for_client_and_record(coding):
    encoders = _encoders()
    if coding not in encoders:
        pytest.skip(f"{coding} decoder not installed (the dev extra brings it)")
    name = coding.split("-")[0].encode()
    encoded = encoders[coding](COMPLETION)  # type: ignore[operator]
    relay = Relay()
    relay.feed(answer(encoded, b"Content-Encoding: %s\r\n" % name))
    head, body = relay.sent()
    assert body == COMPLETION and b"content-encoding" not in head.lower()
    assert relay.outcome()["outcome"] == "completed"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
@on_loop
async def test_a_truncated_compressed_body_is_an_upstream_error(coding):
    encoders = _encoders()
    if coding not in encoders:
        pytest.skip(f"{coding} decoder not installed (the dev extra brings it)")
    encoded = encoders[coding](COMPLETION * 20)  # type: ignore[operator]
    cut = encoded[: len(encoded) // 2]  # framed as complete: only the coding can tell
    relay = Relay()
    relay.feed(answer(cut, b"Content-Encoding: %s\r\n" % coding.encode()))
    head, _ = relay.sent()
    assert head.startswith(b"HTTP/1.1 502 ")
    assert relay.outcome()["outcome"] == "upstream_error"
    assert "truncated" in relay.outcome()["error"]


@on_loop
async def test_a_transfer_coding_other_than_chunked_is_refused_not_relayed():
    relay = Relay()
    payload = gzip.compress(COMPLETION)
    relay.feed(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
               % (len(payload), payload))  # fmt: skip
    head, _ = relay.sent()
    assert head.startswith(b"HTTP/1.1 502 ")
    assert relay.outcome()["outcome"] == "upstream_error"


@on_loop
async def test_headers_the_upstream_connection_header_names_are_removed():
    relay = Relay()
    relay.feed(answer(COMPLETION, b"Connection: X-Hop, keep-alive\r\nX-Hop: private\r\n"
                      b"X-Kept: yes\r\n"))  # fmt: skip
    head, _ = relay.sent()
    assert b"x-hop" not in head.lower() and b"X-Kept: yes" in head


@on_loop
async def test_head_keeps_the_upstream_content_length():
    relay = Relay(head_only=True)
    relay.feed(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1234\r\n\r\n")
    raw = relay.client_t.take()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"Content-Length: 1234" in head and head.count(b"Content-Length") == 1
    assert body == b""


def test_credentials_in_the_query_are_redacted_for_the_record():
    path = ("/v1/models?key=AIza-1&api_key=k2&API-KEY=k3&token=t4&access_token=t5"
            "&client_secret=s6&sig=s7&model=gpt&limit=3&monkey=banana")  # fmt: skip
    out = redact_query(path)
    for secret in ("AIza-1", "k2", "k3", "t4", "t5", "s6", "s7"):
        assert secret not in out, out
    assert "model=gpt" in out and "limit=3" in out and "monkey=banana" in out
    assert out.startswith("/v1/models?key=REDACTED&")
    assert redact_query("/v1/models") == "/v1/models"
