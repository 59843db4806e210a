"""Client-side rules end to end: real clients (requests, httpx, raw sockets) against the
proxy and the scripted upstream; nothing refused is forwarded or recorded."""

from __future__ import annotations

import select
import socket
import time

import httpx
import orjson
import requests

from contagent.proxy.http1 import Limits
from contagent.testing.llm_stub import Reply
from tests.proxy.helpers import (
    exchanges,
    raw_address,
    raw_exchange,
    raw_post,
    read_all,
    wait_for,
)

MSGS = [{"role": "user", "content": "hi"}]
BODY = orjson.dumps({"model": "m", "messages": MSGS})


def test_a_long_target_gets_414_for_requests(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url, limits=Limits(max_target=1024))
    r = requests.get(proxy.rollout_base_url("r1") + "/models?q=" + "a" * 2000, timeout=20)
    assert r.status_code == 414 and stub.requests == []
    assert not (tmp_path / "records" / "r1").exists()


def test_a_large_head_gets_431_for_httpx(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url, limits=Limits(max_head=4096, max_headers=20))
    url = proxy.rollout_base_url("r1") + "/chat/completions"
    r = httpx.post(url, content=BODY, headers={"X-Big": "b" * 5000}, timeout=20)
    assert r.status_code == 431
    many = {f"X-H{i}": "v" for i in range(30)}
    assert httpx.post(url, content=BODY, headers=many, timeout=20).status_code == 431
    assert stub.requests == [] and not (tmp_path / "records" / "r1").exists()


def _send_then_read(proxy, head: bytes) -> bytes:
    """Send all of ``head`` (blocking while the proxy does not read), then read to the end."""
    host, port, _ = raw_address(proxy)
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall(head)
        return read_all(sock)


def test_an_oversized_head_is_answered_431_before_the_close(stub_factory, proxy_factory):
    """2 MiB of header fields, far past the 64 KiB limit: the proxy refuses after 64 KiB, and
    the client, still sending, must get its 431, not a reset for the bytes left unread."""
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    _, _, path = raw_address(proxy)
    fields = b"".join(b"X-F%d: %s\r\n" % (i, b"v" * 1000) for i in range(2 * 1024))
    raw = _send_then_read(proxy, b"POST %s/chat/completions HTTP/1.1\r\nHost: x\r\n%s\r\n"
                          % (path.encode(), fields))  # fmt: skip
    assert raw.startswith(b"HTTP/1.1 431 ") and b"request head over" in raw
    assert stub.requests == []


def test_an_oversized_target_is_answered_414_before_the_close(stub_factory, proxy_factory):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    _, _, path = raw_address(proxy)
    target = path.encode() + b"/models?q=" + b"a" * (4 * 1024 * 1024)
    raw = _send_then_read(proxy, b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % target)
    assert raw.startswith(b"HTTP/1.1 414 ") and stub.requests == []


def test_a_slowloris_client_is_closed(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url, limits=Limits(head_timeout=0.5))
    host, port, path = raw_address(proxy)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(f"POST {path}/chat/completions HTTP/1.1\r\n".encode())
        t0 = time.monotonic()
        for i in range(20):  # one header line every 0.1 s: never a whole head
            try:
                sock.sendall(b"X-%d: v\r\n" % i)
            except OSError:
                break
            if select.select([sock], [], [], 0.1)[0]:  # answered: the proxy gave up
                break
        raw = read_all(sock)
    assert raw.startswith(b"HTTP/1.1 408 ") and time.monotonic() - t0 < 5
    assert stub.requests == []


def test_connections_over_the_cap_get_503(stub_factory, proxy_factory):
    stub = stub_factory([Reply(content="served")])
    proxy = proxy_factory(stub.url, limits=Limits(max_clients=2))
    host, port, path = raw_address(proxy)
    held = [socket.create_connection((host, port), timeout=10) for _ in range(2)]
    try:
        wait_for(lambda: len(proxy.proxy._conns) == 2)
        with socket.create_connection((host, port), timeout=10) as extra:
            raw = read_all(extra)
        assert raw.startswith(b"HTTP/1.1 503 ") and b"Connection: close" in raw
        held[0].sendall(raw_post(path + "/chat/completions", BODY, "Connection: close\r\n"))
        assert b'"served"' in read_all(held[0]), "connections within the cap are served"
    finally:
        for s in held:
            s.close()


def test_a_pipelining_client_that_never_reads_cannot_make_the_proxy_buffer(
    stub_factory, proxy_factory
):
    big = "y" * (256 << 10)  # the socket buffers on the way fill after a dozen answers or so
    stub = stub_factory(lambda req: Reply(content=big))
    proxy = proxy_factory(stub.url)
    host, port, path = raw_address(proxy)
    with socket.create_connection((host, port), timeout=20) as sock:
        one = raw_post(path + "/chat/completions", BODY)
        sock.sendall(one * 99 + raw_post(path + "/chat/completions", BODY, "Connection: close\r\n"))
        time.sleep(1.5)  # time for the proxy to (wrongly) answer all of them into its memory
        answered = len(stub.requests)
        assert answered < 40, f"{answered} requests answered into a client that never reads"
        raw = read_all(sock)  # reading again: every request is answered, in order
    assert raw.count(b"HTTP/1.1 200 OK") == 100 and len(stub.requests) == 100


def test_trailer_fields_are_neither_forwarded_nor_recorded(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    path = raw_address(proxy)[2]
    raw = raw_exchange(
        proxy,
        f"POST {path}/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n".encode()
        + b"%x\r\n%s\r\n0\r\nx-stainless-retry-count: 7\r\nX-Trailer: t\r\n\r\n"
        % (len(BODY), BODY),
    )
    assert raw.startswith(b"HTTP/1.1 200 ")
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert "x-stainless-retry-count" not in req["headers"] and out["outcome"] == "completed"
    assert not {"x-stainless-retry-count", "x-trailer"} & {
        k.lower() for k in stub.requests[0].headers
    }


def test_a_request_transfer_coding_other_than_chunked_gets_501(
    stub_factory, proxy_factory, tmp_path
):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    path = raw_address(proxy)[2]
    raw = raw_exchange(
        proxy,
        f"POST {path}/chat/completions HTTP/1.1\r\nHost: x\r\n"
        "Transfer-Encoding: gzip, chunked\r\n\r\n".encode(),
    )
    assert raw.startswith(b"HTTP/1.1 501 ") and stub.requests == []
    assert not (tmp_path / "records" / "r1").exists()


def test_expect_continue_behind_a_busy_request_is_answered_on_its_turn(stub_factory, proxy_factory):
    stub = stub_factory([Reply(content="first", delay=0.5), Reply(content="second")])
    proxy = proxy_factory(stub.url)
    host, port, path = raw_address(proxy)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(raw_post(path + "/chat/completions", BODY))
        sock.sendall(
            f"POST {path}/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(BODY)}\r\n"
            "Expect: 100-continue\r\nConnection: close\r\n\r\n".encode()
        )
        raw = b""
        while b"100 Continue" not in raw:  # the client waits for it before sending its body
            got = sock.recv(65536)
            assert got, raw
            raw += got
        assert b'"first"' in raw and raw.index(b'"first"') < raw.index(b"100 Continue")
        sock.sendall(BODY)
        raw += read_all(sock)
    assert b'"second"' in raw and len(stub.requests) == 2


def test_upgrades_and_connect_are_never_forwarded(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    host, port, path = raw_address(proxy)
    for head in (
        f"GET {path}/models HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        f"POST {path}/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings"
        f"\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: {len(BODY)}"
        f"\r\n\r\n{BODY.decode()}",
        f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n",
    ):
        raw = raw_exchange(proxy, head.encode())
        want = b"HTTP/1.1 405 " if head.startswith("CONNECT") else b"HTTP/1.1 400 "
        assert raw.startswith(want), (head, raw)
    assert stub.requests == [] and not (tmp_path / "records" / "r1").exists()


def test_limits_are_set_from_the_command_line(stub_factory, tmp_path):
    from tests.proxy.test_log import _start_cli

    stub = stub_factory([Reply()])
    proc, url = _start_cli(stub.url, tmp_path / "records", "--max-target", "64")
    try:
        r = requests.get(f"{url}/r/r1/v1/models?q=" + "a" * 100, timeout=20)
        assert r.status_code == 414 and "over 64 bytes" in r.json()["error"]["message"]
        assert requests.get(f"{url}/r/r1/v1/models", timeout=20).status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
