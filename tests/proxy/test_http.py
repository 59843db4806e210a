"""The proxy's own HTTP/1.1 on both hops: framing, pipelining, limits, odd but legal peers."""

from __future__ import annotations

import gzip
import socket
import threading
import time

import openai
import orjson
import pytest
from aiohttp import web

from contagent.proxy.http1 import Limits
from contagent.testing.llm_stub import Reply
from tests.proxy.helpers import (
    client,
    dechunk,
    exchanges,
    http,
    raw_address,
    raw_exchange,
    raw_post,
)
from tests.proxy.upstreams import AiohttpUpstream

MSGS = [{"role": "user", "content": "hi"}]
BODY = orjson.dumps({"model": "m", "messages": MSGS})


def test_pipelined_requests_are_answered_in_order(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="first", delay=0.2), Reply(content="second")])
    proxy = proxy_factory(stub.url)
    path = raw_address(proxy)[2] + "/chat/completions"
    raw = raw_exchange(
        proxy, raw_post(path, BODY) + raw_post(path, BODY, "Connection: close\r\n"), timeout=20
    )
    assert raw.count(b"HTTP/1.1 200 OK") == 2
    assert raw.index(b'"first"') < raw.index(b'"second"')
    pairs = exchanges(tmp_path / "records", "r1")
    assert [o["outcome"] for _, o in pairs] == ["completed", "completed"]


def test_malformed_request_gets_400_and_nothing_is_recorded(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    raw = raw_exchange(
        proxy, b"POST /r/r1/v1/chat/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n"
    )
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"Connection: close" in head
    assert "malformed HTTP request" in orjson.loads(body)["error"]["message"]
    assert not (tmp_path / "records" / "r1").exists() and stub.requests == []


def test_body_over_the_limit_gets_413(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url, limits=Limits(max_body=1000))
    r = http("POST", proxy.rollout_base_url("r1") + "/chat/completions", content=b"x" * 5000)
    assert r.status_code == 413 and "over 1000 bytes" in r.json()["error"]["message"]
    assert stub.requests == [] and not (tmp_path / "records" / "r1").exists()


def test_expect_100_continue_is_honoured(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="after continue")])
    proxy = proxy_factory(stub.url)
    host, port, path = raw_address(proxy)
    with socket.create_connection((host, port), timeout=10) as sock:
        head = raw_post(path + "/chat/completions", b"", "Expect: 100-continue\r\n")
        sock.sendall(head.replace(b"Content-Length: 0", b"Content-Length: %d" % len(BODY)))
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(BODY)
        raw = b""
        while b'"after continue"' not in raw:
            got = sock.recv(65536)
            assert got, raw
            raw += got
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "completed"
    assert "expect" not in {k.lower() for k in stub.requests[0].headers}


def test_http10_stream_ends_with_the_connection(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="a b c", chunks=3)])
    proxy = proxy_factory(stub.url)
    body = orjson.dumps({"model": "m", "messages": MSGS, "stream": True})
    raw = raw_exchange(
        proxy, raw_post(raw_address(proxy)[2] + "/chat/completions", body, version="1.0")
    )
    head, _, data = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
    assert data.startswith(b"data: {") and data.endswith(b"data: [DONE]\n\n")
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "completed" and out["stream_events"][-1] == "[DONE]"


COMPLETION = {
    "id": "c", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "zipped"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}  # fmt: skip


@pytest.fixture
def odd_upstream(upstream):
    return lambda handler, ssl_context=None, **kw: upstream(
        AiohttpUpstream(handler, ssl_context, **kw)
    )


def test_gzip_from_upstream_is_decoded_for_record_and_client(odd_upstream, proxy_factory, tmp_path):
    async def handler(request: web.BaseRequest) -> web.Response:
        await request.read()
        assert request.headers.get("Accept-Encoding") == "identity"
        return web.Response(
            body=gzip.compress(orjson.dumps(COMPLETION)),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )

    up = odd_upstream(handler)
    proxy = proxy_factory(up.url)
    resp = client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert resp.choices[0].message.content == "zipped"
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "completed" and out["response"] == COMPLETION


def test_upstream_closing_after_each_answer_and_one_connection(
    odd_upstream, proxy_factory, tmp_path
):
    """``Connection: close`` upstream, and ``max_connections=1`` queueing concurrent requests."""
    peers: set[int] = set()
    active = [0, 0]  # now, most at once

    async def handler(request: web.BaseRequest) -> web.Response:
        import asyncio

        active[0] += 1
        active[1] = max(active)
        peers.add(request.transport.get_extra_info("peername")[1])
        await request.read()
        await asyncio.sleep(0.05)
        active[0] -= 1
        resp = web.Response(body=orjson.dumps(COMPLETION), content_type="application/json")
        resp.force_close()
        return resp

    up = odd_upstream(handler)
    proxy = proxy_factory(up.url, max_connections=1)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client(proxy).chat.completions.create(model="m", messages=MSGS)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert errors == []
    assert active[1] == 1, "never more than max_connections upstream at once"
    assert len(peers) == 4, "a connection the upstream closed is not reused"
    assert [o["outcome"] for _, o in exchanges(tmp_path / "records", "r1")] == ["completed"] * 4


def test_head_and_get_carry_no_invented_body(odd_upstream, proxy_factory, tmp_path):
    seen: list[tuple[str, str | None]] = []

    async def handler(request: web.BaseRequest) -> web.Response:
        seen.append((request.method, request.headers.get("Content-Length")))
        return web.Response(body=b'{"data": []}', content_type="application/json")

    up = odd_upstream(handler)
    proxy = proxy_factory(up.url)
    base = proxy.rollout_base_url("r1")
    assert http("HEAD", base + "/models").status_code == 200
    r = http("GET", base + "/models")
    assert r.status_code == 200 and r.json() == {"data": []}
    assert seen == [("HEAD", None), ("GET", None)]
    outs = [o for _, o in exchanges(tmp_path / "records", "r1")]
    assert [o["client_status"] for o in outs] == [200, 200]


def test_slow_client_back_pressure_then_the_connection_is_reused(
    odd_upstream, proxy_factory, tmp_path, monkeypatch
):
    """A client reading a stream slowly pauses the upstream read (so the upstream's TCP
    window, not the proxy, holds the backlog); a pause longer than the upstream timeout is
    the client's, not an upstream fault; the pooled connection works after."""
    from contagent.proxy.upstream import UpstreamConnection

    pauses: list[int] = []
    real_pause = UpstreamConnection.pause_reading

    def pause_reading(self):
        pauses.append(1)
        real_pause(self)

    monkeypatch.setattr(UpstreamConnection, "pause_reading", pause_reading)
    chunk = orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0,
        "model": "m", "choices": [{"index": 0, "delta": {"content": "y" * 4000}}]})  # fmt: skip
    last = orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0,
        "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})  # fmt: skip
    events = 2000  # ~8 MB: far more than the socket buffers on the way hold
    peers: list[int] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        peers.append(request.transport.get_extra_info("peername")[1])
        if len(peers) > 1:
            return web.Response(body=orjson.dumps(COMPLETION), content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(events):
            await resp.write(b"data: " + chunk + b"\n\n")
        await resp.write(b"data: " + last + b"\n\ndata: [DONE]\n\n")
        return resp

    up = odd_upstream(handler)
    proxy = proxy_factory(up.url, upstream_timeout=0.5)
    host, port, path = raw_address(proxy)
    body = orjson.dumps({"model": "m", "messages": MSGS, "stream": True})
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(20)
        sock.connect((host, port))
        sock.sendall(raw_post(path + "/chat/completions", body, "Connection: close\r\n"))
        raw = b""
        stalled = False
        while True:
            got = sock.recv(4096)
            if not got:
                break
            raw += got
            if len(raw) < (1 << 20):
                time.sleep(0.002)  # slow at first, long enough for the proxy's buffer to fill
            elif not stalled:
                stalled = True
                time.sleep(1.2)  # not reading for longer than the upstream timeout
    payload = dechunk(raw.partition(b"\r\n\r\n")[2])
    assert payload.count(b"data: ") == events + 2 and payload.endswith(b"data: [DONE]\n\n")
    assert pauses, "the slow client never paused the upstream read"
    resp = client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert resp.choices[0].message.content == "zipped"
    assert len(set(peers)) == 1, "the same upstream connection served both"
    outs = [o["outcome"] for _, o in exchanges(tmp_path / "records", "r1")]
    assert outs == ["completed", "completed"]


def test_garbage_from_clients_never_breaks_the_proxy(stub_factory, proxy_factory, tmp_path, caplog):
    """Any bytes on the agent side: a 400 or a plain close, no error in the proxy, and it
    goes on serving (a property test of the request reader)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    stub = stub_factory(lambda req: Reply(content="still here"))
    proxy = proxy_factory(stub.url)
    host, port, path = raw_address(proxy)
    valid = raw_post(path + "/chat/completions", BODY)
    garbage = st.one_of(
        st.binary(min_size=1, max_size=300),
        st.tuples(st.integers(1, len(valid) - 1), st.binary(min_size=1, max_size=20)).map(
            lambda cut: valid[: cut[0]] + cut[1] + valid[cut[0] :]
        ),
    )

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(garbage)
    def check(data: bytes) -> None:
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            raw = b""
            try:
                while got := sock.recv(65536):
                    raw += got
            except (ConnectionResetError, TimeoutError):
                pass
        if raw:
            assert raw.startswith(b"HTTP/1.1 "), raw[:80]

    caplog.set_level("ERROR")
    check()
    resp = client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert resp.choices[0].message.content == "still here"
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def test_idle_agent_connections_are_closed(stub_factory, proxy_factory):
    stub = stub_factory([Reply(content="one")])
    proxy = proxy_factory(stub.url, limits=Limits(idle_timeout=0.3))
    host, port, path = raw_address(proxy)
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(raw_post(path + "/chat/completions", BODY))
        raw = b""
        while b'"one"' not in raw:
            raw += sock.recv(65536)
        import time

        t0 = time.monotonic()
        assert sock.recv(100) == b"", "closed once idle"
        assert 0.2 < time.monotonic() - t0 < 3


async def _completion(request: web.BaseRequest) -> web.Response:
    await request.read()
    return web.Response(body=orjson.dumps(COMPLETION), content_type="application/json")


def test_https_upstream_is_verified(odd_upstream, proxy_factory, tmp_path, monkeypatch):
    """TLS to the model server: a certificate from a trusted CA works, any other is a 502."""
    import ssl

    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    up = odd_upstream(_completion, ssl_context=server_ctx)
    untrusted = proxy_factory(up.url, record_dir=tmp_path / "untrusted")
    with pytest.raises(openai.InternalServerError) as err:
        client(untrusted).chat.completions.create(model="m", messages=MSGS)
    assert err.value.status_code == 502
    [(_, out)] = exchanges(tmp_path / "untrusted", "r1")
    assert out["outcome"] == "upstream_error" and "CERTIFICATE_VERIFY_FAILED" in out["error"]

    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    given = proxy_factory(up.url, record_dir=tmp_path / "given", upstream_ca=ca_file)
    resp = client(given).chat.completions.create(model="m", messages=MSGS)
    assert resp.choices[0].message.content == "zipped"
    [(_, out)] = exchanges(tmp_path / "given", "r1")
    assert out["outcome"] == "completed"

    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # read when the proxy is made
    trusted = proxy_factory(up.url, record_dir=tmp_path / "trusted")
    resp = client(trusted).chat.completions.create(model="m", messages=MSGS)
    assert resp.choices[0].message.content == "zipped"
    [(_, out)] = exchanges(tmp_path / "trusted", "r1")
    assert out["outcome"] == "completed"

    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    only_other = proxy_factory(up.url, record_dir=tmp_path / "only-other", upstream_ca=other)
    with pytest.raises(openai.InternalServerError):  # the given CA replaces SSL_CERT_FILE's
        client(only_other).chat.completions.create(model="m", messages=MSGS)


def test_connections_the_upstream_closed_while_idle_are_not_used(
    odd_upstream, proxy_factory, tmp_path
):
    """The server drops idle keep-alive connections (vLLM after 5 s; here 0.1 s): the next
    request opens a new one instead of failing on the dead one."""
    import time

    up = odd_upstream(_completion, keepalive_timeout=0.1)
    proxy = proxy_factory(up.url)
    for _ in range(3):
        client(proxy).chat.completions.create(model="m", messages=MSGS)
        time.sleep(0.3)
    outs = [o["outcome"] for _, o in exchanges(tmp_path / "records", "r1")]
    assert outs == ["completed"] * 3


def test_idle_upstream_connections_are_reused_only_while_fresh(
    odd_upstream, proxy_factory, monkeypatch
):
    import time

    # The limit is wide enough that a loaded machine's scheduling never ages a connection
    # between two back-to-back requests past it.
    monkeypatch.setattr("contagent.proxy.pool.IDLE_REUSE_S", 1.0)
    peers: list[int] = []

    async def handler(request: web.BaseRequest) -> web.Response:
        peers.append(request.transport.get_extra_info("peername")[1])
        return await _completion(request)

    up = odd_upstream(handler)  # aiohttp keeps idle connections for 75 s
    proxy = proxy_factory(up.url)
    c = client(proxy)
    for pause in (0.0, 1.4, 0.0):
        time.sleep(pause)
        c.chat.completions.create(model="m", messages=MSGS)
    assert peers[0] != peers[1], "a connection idle past the limit is not reused"
    assert peers[1] == peers[2], "a fresh idle connection is"


@pytest.mark.parametrize("split", [b"data: [DO", b"data: [DONE]\n"])
def test_a_done_event_split_across_reads_still_waits_for_the_record(
    odd_upstream, proxy_factory, tmp_path, monkeypatch, split
):
    """``[DONE]`` cut by a read boundary (in the token, or before its closing blank line):
    the outcome must still be on disk before the client sees the end. Here it cannot be
    written and the client holds part of the event, so the connection is cut: the client
    gets a connection error, not a clean finish."""
    import asyncio

    from tests.proxy.helpers import fail_outcomes

    event = (
        b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
        b'[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
    )
    done = b"data: [DONE]\n\n"

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in (event + split, done[len(split) :]):
            await resp.write(piece)
            await asyncio.sleep(0.1)  # two reads on the proxy's side
        await resp.write_eof()
        return resp

    proxy = proxy_factory(odd_upstream(handler).url)
    fail_outcomes(proxy, monkeypatch)
    with pytest.raises(openai.APIConnectionError):
        list(client(proxy).chat.completions.create(model="m", messages=MSGS, stream=True))
