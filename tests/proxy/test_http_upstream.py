"""The proxy's own HTTP/1.1 toward the upstream: codings, closing and idle connections,
TLS, and a stream's end cut across reads (odd but legal servers)."""

from __future__ import annotations

import gzip
import threading
import time

import openai
import orjson
import pytest
from aiohttp import web

from tests.proxy.helpers import client, exchanges
from tests.proxy.upstreams import COMPLETION, completion

MSGS = [{"role": "user", "content": "hi"}]


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


def test_https_upstream_is_verified(odd_upstream, proxy_factory, tmp_path, monkeypatch):
    """TLS to the model server: a certificate from a trusted CA works, any other is a 502."""
    import ssl

    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    up = odd_upstream(completion, ssl_context=server_ctx)
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

    up = odd_upstream(completion, keepalive_timeout=0.1)
    proxy = proxy_factory(up.url)
    for _ in range(3):
        client(proxy).chat.completions.create(model="m", messages=MSGS)
        time.sleep(0.3)
    outs = [o["outcome"] for _, o in exchanges(tmp_path / "records", "r1")]
    assert outs == ["completed"] * 3


def test_idle_upstream_connections_are_reused_only_while_fresh(
    odd_upstream, proxy_factory, monkeypatch
):

    # The limit is wide enough that a loaded machine's scheduling never ages a connection
    # between two back-to-back requests past it.
    monkeypatch.setattr("contagent.proxy.pool.IDLE_REUSE_S", 1.0)
    peers: list[int] = []

    async def handler(request: web.BaseRequest) -> web.Response:
        peers.append(request.transport.get_extra_info("peername")[1])
        return await completion(request)

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
