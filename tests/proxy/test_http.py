"""The proxy's own HTTP/1.1 toward the agent: framing, pipelining, limits, odd but legal
clients (the upstream hop: test_http_upstream.py)."""

from __future__ import annotations

import socket
import time

import orjson
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
from tests.proxy.upstreams import COMPLETION

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
    # the reuse is what is checked, not the idle expiry: a loaded machine may take longer
    # than IDLE_REUSE_S to send the second request
    monkeypatch.setattr("contagent.proxy.pool.IDLE_REUSE_S", 60.0)
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
    proxy = proxy_factory(up.url, upstream_timeout=1.0)
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
                time.sleep(2.5)  # not reading for longer than the upstream timeout
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
        sent = time.monotonic()  # the idle time begins later, once the answer is sent
        sock.sendall(raw_post(path + "/chat/completions", BODY))
        raw = b""
        while b'"one"' not in raw:
            raw += sock.recv(65536)
        assert sock.recv(100) == b"", "closed once idle"
        assert 0.3 <= time.monotonic() - sent < 10, "kept open while not idle"
