"""The proxy's own errors (an unreachable or slow upstream, an answer it cannot translate or
record, a request it refuses, a stream it cuts) reach each client in its API's shape, on the
native route and the token route alike: the OpenAI shape on chat completions (byte for byte
as ever), completions and Responses, Anthropic's on Messages; mid-stream, the API's own error
event. The recorded outcome says what the client got (its status, and the message)."""

from __future__ import annotations

import anthropic
import openai
import orjson
import pytest

from contagent.proxy.http1 import Limits
from contagent.testing.llm_stub import Raw, Reply
from contagent.wire.translate.rebuild import translation_problems
from tests.helpers import free_port
from tests.proxy.helpers import (
    CLIENT_KEY,
    content_type,
    exchanges,
    fail_outcomes,
    post_answer,
    raw_address,
    raw_exchange,
    raw_post,
)
from tests.proxy.test_token_route import VLLM

BODIES = {
    "/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/completions": {"model": "m", "prompt": "hi"},
    "/messages": {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]},
    "/responses": {"model": "m", "input": "hi"},
}
#: (route, the token route serves it): every client API, the translated ones both ways
ROUTES = [
    ("/chat/completions", False),
    ("/completions", False),
    ("/messages", False),
    ("/messages", True),
    ("/responses", False),
    ("/responses", True),
]


def _proxy(proxy_factory, url: str, token_route: bool, **kw):
    if token_route:
        kw.update(tokens=True, server=dict(VLLM))
    return proxy_factory(url, **kw)


def _post(proxy, route: str, stream: bool = False) -> tuple[bytes, bytes]:
    return post_answer(proxy, route, {**BODIES[route], "stream": stream})


def _body(route: str, status: int, message: str, kind: str, anthropic_kind: str) -> bytes:
    """The error body a client of ``route`` must get."""
    if route == "/messages":
        return orjson.dumps(
            {"type": "error", "error": {"type": anthropic_kind, "message": message}}
        )
    return orjson.dumps({"error": {"message": message, "type": kind, "code": status}})


def _event(route: str, status: int, message: str, kind: str, sent: int) -> bytes:
    """The mid-stream error event a client of ``route`` must get after ``sent`` events."""
    if route == "/messages":
        error = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
    if route == "/responses":
        event = {"type": "error", "code": kind, "message": message, "param": None,
                 "sequence_number": sent}  # fmt: skip
        return b"event: error\ndata: " + orjson.dumps(event) + b"\n\n"
    return (
        b"data: "
        + orjson.dumps({"error": {"message": message, "type": kind, "code": status}})
        + b"\n\n"
    )


@pytest.mark.parametrize(("route", "token_route"), ROUTES)
def test_an_unreachable_upstream_is_a_502_in_the_client_s_shape(
    proxy_factory, tmp_path, route, token_route
):
    proxy = _proxy(proxy_factory, f"http://127.0.0.1:{free_port()}", token_route)
    head, payload = _post(proxy, route)
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and out["client_status"] == 502
    assert "unreachable" in out["error"] and out["response"] is None
    assert head.startswith(b"HTTP/1.1 502 ") and content_type(head) == b"application/json"
    assert payload == _body(route, 502, out["error"], "upstream_error", "api_error")


@pytest.mark.parametrize(("route", "token_route"), ROUTES)
def test_an_upstream_timeout_is_a_504_in_the_client_s_shape(
    stub_factory, proxy_factory, tmp_path, route, token_route
):
    """Anthropic names a 504 ``timeout_error``."""
    stub = stub_factory([Reply(delay=2.0)])
    proxy = _proxy(proxy_factory, stub.url, token_route, upstream_timeout=0.3)
    head, payload = _post(proxy, route)
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and out["client_status"] == 504
    assert head.startswith(b"HTTP/1.1 504 ") and content_type(head) == b"application/json"
    assert payload == _body(route, 504, out["error"], "upstream_error", "timeout_error")


@pytest.mark.parametrize(("route", "token_route"), ROUTES)
def test_a_stream_cut_midway_ends_with_the_api_s_error_event(
    stub_factory, proxy_factory, tmp_path, route, token_route
):
    """What arrived is relayed, then the error as an event of the client's API, numbered
    after the events before it on Responses; the record holds what the client got before it."""
    stub = stub_factory([Reply(content="one two three four five", chunks=5, cut_after=3)])
    proxy = _proxy(proxy_factory, stub.url, token_route)
    head, payload = _post(proxy, route, stream=True)
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and "broke" in out["error"]
    assert out["client_status"] == 200 and head.startswith(b"HTTP/1.1 200 ")
    assert content_type(head).startswith(b"text/event-stream")
    sent = len(out["stream_events"])
    assert sent and "[DONE]" not in out["stream_events"]
    event = _event(route, 502, out["error"], "upstream_error", sent)
    assert payload.endswith(event) and payload.count(b"error") == event.count(b"error")
    before = payload[: -len(event)]
    assert before.endswith(b"\n\n")  # the error is an event of its own
    if token_route:  # what the client got before the error is what the record says
        assert before.count(b"\ndata: ") + before.startswith(b"data: ") == sent
        assert translation_problems({0: req}, {0: out}) == []


@pytest.mark.parametrize("route", ["/messages", "/responses"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_the_token_route_cannot_translate_is_an_error_in_the_client_s_shape(
    stub_factory, proxy_factory, tmp_path, route, stream
):
    """A JSON answer: a 502 of the client's shape; a stream: its error event after the
    events made before the translation failed."""
    first = {"id": "c", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant"}}]}  # fmt: skip
    bad = {**first, "choices": [{"index": 0, "delta": "not a delta"}]}
    if stream:
        chunks = [orjson.dumps(first), orjson.dumps(bad), b"[DONE]"]
        body = b"".join(b"data: " + c + b"\n\n" for c in chunks)
        move = Raw(body, content_type="text/event-stream")
    else:
        move = Raw(orjson.dumps({"id": "c", "object": "chat.completion", "choices": []}))
    stub = stub_factory([move])
    proxy = _proxy(proxy_factory, stub.url, True)
    head, payload = _post(proxy, route, stream)
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error"
    assert out["error"].startswith("the upstream answer could not be translated (")
    if stream:
        assert head.startswith(b"HTTP/1.1 200 ") and out["client_status"] == 200
        sent = len(out["stream_events"])
        assert payload.endswith(_event(route, 502, out["error"], "upstream_error", sent))
    else:
        assert head.startswith(b"HTTP/1.1 502 ") and out["client_status"] == 502
        assert content_type(head) == b"application/json"
        assert payload == _body(route, 502, out["error"], "upstream_error", "api_error")


UNRECORDED = "contagent proxy could not record the response, so it is not passed on"


@pytest.mark.parametrize(("route", "token_route"), ROUTES)
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_that_cannot_be_recorded_is_a_500_in_the_client_s_shape(
    stub_factory, proxy_factory, monkeypatch, route, token_route, stream
):
    stub = stub_factory([Reply(content="unrecorded", chunks=2)])
    proxy = _proxy(proxy_factory, stub.url, token_route)
    fail_outcomes(proxy, monkeypatch)
    head, payload = _post(proxy, route, stream)
    if not stream:
        assert head.startswith(b"HTTP/1.1 500 ") and content_type(head) == b"application/json"
        assert payload == _body(route, 500, UNRECORDED, "proxy_error", "api_error")
        return
    assert head.startswith(b"HTTP/1.1 200 ")
    event = _event(route, 500, UNRECORDED, "proxy_error", 0)
    if route == "/responses":  # numbered after every event the client got
        sent = payload.count(b"\nevent: ") + payload.startswith(b"event: ") - 1
        event = _event(route, 500, UNRECORDED, "proxy_error", sent)
    assert payload.endswith(event)


@pytest.mark.parametrize("route", ["/chat/completions", "/messages", "/responses"])
def test_the_proxy_s_refusals_take_the_client_s_shape(stub_factory, proxy_factory, route):
    """A route outside ``/r/<rollout_id>``, a rollout id that is no path segment, a body
    over the limit: each answered in the shape of the API the path names."""
    stub = stub_factory([])
    proxy = proxy_factory(stub.url, limits=Limits(max_body=1000))
    path = raw_address(proxy)[2]
    body = orjson.dumps(BODIES[route])
    cases = [
        (b"/v1" + route.encode(), body, 404, "not_found", "not_found_error"),
        (b"/r/.." + route.encode(), body, 400, "invalid_request_error", "invalid_request_error"),
        ((path + route).encode(), b"x" * 2000, 413, "invalid_request_error", "request_too_large"),
    ]
    for target, data, status, kind, anthropic_kind in cases:
        request = raw_post(target.decode(), data, "Connection: close\r\n")
        head, _, payload = raw_exchange(proxy, request).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d " % status), (target, head)
        assert content_type(head) == b"application/json"
        error = orjson.loads(payload)["error"]
        message = error["message"]
        assert payload == _body(route, status, message, kind, anthropic_kind), target
    assert stub.requests == []


def _anthropic(proxy) -> anthropic.Anthropic:
    base = proxy.rollout_base_url("r1").removesuffix("/v1")
    return anthropic.Anthropic(base_url=base, api_key=CLIENT_KEY, max_retries=0, timeout=20)


def _openai(proxy) -> openai.OpenAI:
    base = proxy.rollout_base_url("r1")
    return openai.OpenAI(base_url=base, api_key=CLIENT_KEY, max_retries=0, timeout=20)


@pytest.mark.parametrize("token_route", [False, True])
def test_the_real_clients_raise_their_api_s_error_for_the_proxy_s_own(
    stub_factory, proxy_factory, token_route
):
    """Claude Code's and Codex's SDKs read the proxy's own errors: the error class of the
    status with the message and (Messages) Anthropic's type; a cut stream raises on the
    Messages error event, and arrives as the Responses ``error`` event."""
    cut = Reply(content="one two three four five", chunks=5, cut_after=3)
    stub = stub_factory([Reply(delay=2.0), Reply(delay=2.0), cut, cut])
    proxy = _proxy(proxy_factory, stub.url, token_route, upstream_timeout=0.3)
    claude, codex = _anthropic(proxy), _openai(proxy)
    with pytest.raises(anthropic.InternalServerError) as slow:
        claude.messages.create(**BODIES["/messages"])
    assert slow.value.status_code == 504 and "timed out" in slow.value.message
    assert slow.value.body["error"]["type"] == "timeout_error"  # type: ignore[index]
    with pytest.raises(openai.InternalServerError) as late:
        codex.responses.create(**BODIES["/responses"])
    assert late.value.status_code == 504 and "timed out" in late.value.message
    got = []
    with pytest.raises(anthropic.APIStatusError) as broke:
        for event in claude.messages.create(**BODIES["/messages"], stream=True):
            got.append(event.type)
    assert got and got[0] == "message_start" and "message_stop" not in got
    assert broke.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert "broke" in broke.value.body["error"]["message"]  # type: ignore[index]
    events = list(codex.responses.create(**BODIES["/responses"], stream=True))
    assert events[0].type == "response.created" and events[-1].type == "error"
    assert "broke" in events[-1].message and events[-1].sequence_number == len(events) - 1


def test_the_anthropic_sdk_reads_a_502_of_an_unreachable_upstream(proxy_factory):
    proxy = proxy_factory(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(anthropic.InternalServerError) as err:
        _anthropic(proxy).messages.create(**BODIES["/messages"])
    assert err.value.status_code == 502 and "unreachable" in err.value.message
    assert err.value.body["error"]["type"] == "api_error"  # type: ignore[index]
