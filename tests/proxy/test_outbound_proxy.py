"""The upstream hop honours HTTP_PROXY / HTTPS_PROXY / NO_PROXY, as other HTTP clients do."""

from __future__ import annotations

import asyncio
import base64
import ssl

import pytest

from contagent.errors import ContagentError
from contagent.testing.llm_stub import Reply
from tests.proxy.helpers import exchanges, http
from tests.proxy.upstreams import AiohttpUpstream, ForwardProxy, completion

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
def forward_proxy(monkeypatch, upstream):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return upstream(ForwardProxy())


def _ask(proxy) -> int:
    r = http("POST", proxy.rollout_base_url("r1") + "/chat/completions",
             json={"model": "m", "messages": MSGS})  # fmt: skip
    return r.status_code


def test_a_plain_upstream_goes_through_http_proxy(
    forward_proxy, stub_factory, proxy_factory, tmp_path, monkeypatch
):
    stub = stub_factory([Reply(content="one"), Reply(content="two")])
    monkeypatch.setenv("HTTP_PROXY", f"http://user:p%40ss@127.0.0.1:{forward_proxy.port}")
    proxy = proxy_factory(stub.url)
    assert _ask(proxy) == 200 and _ask(proxy) == 200
    head = forward_proxy.heads[0]
    assert head.startswith(f"POST {stub.url}/v1/chat/completions HTTP/1.1".encode())
    assert b"Proxy-Authorization: Basic " + base64.b64encode(b"user:p@ss") in head
    assert len(stub.requests) == 2
    assert [o["outcome"] for _, o in exchanges(tmp_path / "records", "r1")] == ["completed"] * 2


def test_no_proxy_bypasses_it(forward_proxy, stub_factory, proxy_factory, monkeypatch):
    stub = stub_factory([Reply()])
    monkeypatch.setenv("http_proxy", forward_proxy.url)
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    assert _ask(proxy_factory(stub.url)) == 200
    assert forward_proxy.heads == [] and len(stub.requests) == 1


def test_an_https_upstream_is_tunnelled_through_https_proxy_and_still_verified(
    forward_proxy, upstream, proxy_factory, tmp_path, monkeypatch
):
    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    up = upstream(AiohttpUpstream(completion, server_ctx))
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("HTTPS_PROXY", forward_proxy.url)
    proxy = proxy_factory(up.url, upstream_ca=ca_file)
    assert _ask(proxy) == 200
    assert forward_proxy.heads[0].startswith(f"CONNECT localhost:{up.port} HTTP/1.1".encode())
    untrusted = proxy_factory(up.url, record_dir=tmp_path / "untrusted")
    assert _ask(untrusted) == 502  # the tunnel does not skip verification
    [(_, out)] = exchanges(tmp_path / "untrusted", "r1")
    assert "CERTIFICATE_VERIFY_FAILED" in out["error"]


def test_an_https_outbound_proxy_is_refused_with_a_clear_error(forward_proxy, monkeypatch):
    from contagent.proxy.tunnel import outbound_proxy

    monkeypatch.setenv("HTTP_PROXY", "https://proxy.invalid:3128")
    with pytest.raises(ContagentError, match="only http:// outbound proxies"):
        outbound_proxy("http", "model.invalid")


async def _tunnel_through(answer: bytes) -> None:
    """open_tunnel against an outbound proxy that sends ``answer`` to CONNECT, then closes."""
    from contagent.proxy.tunnel import OutboundProxy, open_tunnel

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        via = OutboundProxy("127.0.0.1", port, b"")
        await open_tunnel(via, "upstream.test", 443, ssl.create_default_context())
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (
            b"HTTP/1.1 403 Forbidden\r\n\r\n",
            "outbound proxy refused CONNECT: HTTP/1.1 403 Forbidden",
        ),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 20_000, "oversized answer to CONNECT"),
        (b"", "closed the connection during CONNECT"),
    ],
)
def test_an_outbound_proxy_that_does_not_open_the_tunnel_is_an_error(
    answer: bytes, error: str
) -> None:
    with pytest.raises(OSError, match=error):
        asyncio.run(_tunnel_through(answer))
