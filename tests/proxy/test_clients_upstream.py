"""Upstream rules end to end: real clients (openai, httpx, requests, aiohttp) through the
proxy to a real upstream (a raw TCP server answering given bytes, or uvicorn)."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import aiohttp
import httpx
import requests

from tests.proxy.helpers import CLIENT_KEY, client, exchanges
from tests.proxy.test_wire_upstream import CHUNK, COMPLETION, answer, sse
from tests.proxy.upstreams import RawUpstream, Uvicorn

MSGS = [{"role": "user", "content": "hi"}]


def test_interim_answers_are_skipped_for_the_openai_client(upstream, proxy_factory, tmp_path):
    up = upstream(RawUpstream(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
        + answer(COMPLETION)
    ))  # fmt: skip
    resp = client(proxy_factory(up.url)).chat.completions.create(model="m", messages=MSGS)
    assert resp.choices[0].message.content == "hello"
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "completed" and out["status"] == 200


def test_a_mixed_case_event_stream_is_relayed_as_a_stream_to_httpx(
    upstream, proxy_factory, tmp_path
):
    payload = sse(CHUNK, b"[DONE]")
    up = upstream(RawUpstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream\r\nContent-Length: %d\r\n\r\n%s"
        % (len(payload), payload)
    ))  # fmt: skip
    proxy = proxy_factory(up.url)
    url = proxy.rollout_base_url("r1") + "/chat/completions"
    body = {"model": "m", "messages": MSGS, "stream": True}
    with httpx.stream("POST", url, json=body, timeout=20) as r:
        assert r.headers["transfer-encoding"] == "chunked"
        got = b"".join(r.iter_bytes())
    assert got == payload
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["stream_events"] == [CHUNK.decode(), "[DONE]"] and out["outcome"] == "completed"


def _encoded() -> list[tuple[str, bytes]]:
    c = zlib.compressobj(wbits=-15)
    out = [("gzip", gzip.compress(COMPLETION)), ("deflate", zlib.compress(COMPLETION)),
           ("deflate", c.compress(COMPLETION) + c.flush())]  # fmt: skip
    import brotli
    import zstandard

    out += [("br", brotli.compress(COMPLETION)),
            ("zstd", zstandard.ZstdCompressor().compress(COMPLETION))]  # fmt: skip
    return out


def test_content_codings_are_decoded_for_aiohttp(upstream, proxy_factory, tmp_path):
    cases = _encoded()
    up = upstream(RawUpstream(lambda req: answer(
        cases[len(up.requests) - 1][1],
        b"Content-Encoding: %s\r\n" % cases[len(up.requests) - 1][0].encode(),
    )))  # fmt: skip
    proxy = proxy_factory(up.url)
    url = proxy.rollout_base_url("r1") + "/chat/completions"

    async def main() -> list[tuple[int, bytes, str | None]]:
        out = []
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for _ in cases:
                async with session.post(url, json={"model": "m", "messages": MSGS}) as r:
                    out.append((r.status, await r.read(), r.headers.get("Content-Encoding")))
        return out

    got = asyncio.run(main())
    assert got == [(200, COMPLETION, None)] * len(cases)
    outs = [o["outcome"] for _, o in exchanges(tmp_path / "records", "r1")]
    assert outs == ["completed"] * len(cases)


def test_a_truncated_gzip_body_is_a_502_for_requests(upstream, proxy_factory, tmp_path):
    cut = gzip.compress(COMPLETION * 50)[:200]
    up = upstream(RawUpstream(answer(cut, b"Content-Encoding: gzip\r\n")))
    proxy = proxy_factory(up.url)
    r = requests.post(proxy.rollout_base_url("r1") + "/chat/completions",
                      json={"model": "m", "messages": MSGS}, timeout=20)  # fmt: skip
    assert r.status_code == 502
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and "gzip body truncated" in out["error"]


def test_a_gzip_transfer_coding_is_refused_for_requests(upstream, proxy_factory, tmp_path):
    payload = gzip.compress(COMPLETION)
    up = upstream(RawUpstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)
    ))  # fmt: skip
    r = requests.post(proxy_factory(up.url).rollout_base_url("r1") + "/chat/completions",
                      json={"model": "m", "messages": MSGS}, timeout=20)  # fmt: skip
    assert r.status_code == 502 and b"transfer coding" in r.content
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error"


def test_headers_named_by_the_upstream_connection_header_do_not_reach_requests(
    upstream, proxy_factory
):
    up = upstream(RawUpstream(
        answer(COMPLETION, b"Connection: X-Internal-Route\r\nX-Internal-Route: gpu-7\r\n"
               b"X-Request-Id: abc\r\n")
    ))  # fmt: skip
    r = requests.post(proxy_factory(up.url).rollout_base_url("r1") + "/chat/completions",
                      json={"model": "m", "messages": MSGS}, timeout=20)  # fmt: skip
    assert r.status_code == 200 and r.headers["X-Request-Id"] == "abc"
    assert "X-Internal-Route" not in r.headers


QUERIES: list[bytes] = []


async def _asgi(scope, receive, send) -> None:
    """An upstream on uvicorn: a JSON answer, whose HEAD carries the GET's length;
    the query strings it receives are kept in ``QUERIES``."""
    assert scope["type"] == "http"
    while (await receive()).get("more_body"):
        pass
    QUERIES.append(scope["query_string"])
    body = COMPLETION
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def test_head_keeps_the_upstream_content_length_for_requests(upstream, proxy_factory, tmp_path):
    up = upstream(Uvicorn(_asgi))
    url = proxy_factory(up.url).rollout_base_url("r1") + "/models"
    r = requests.head(url, timeout=20)
    assert r.status_code == 200 and r.headers["Content-Length"] == str(len(COMPLETION))
    assert requests.get(url, timeout=20).content == COMPLETION  # the connection stays in step
    outs = [o["client_status"] for _, o in exchanges(tmp_path / "records", "r1")]
    assert outs == [200, 200]


def test_query_credentials_reach_the_upstream_but_never_the_disk(upstream, proxy_factory, tmp_path):
    up = upstream(Uvicorn(_asgi))
    proxy = proxy_factory(up.url)
    secrets = {"key": "AIzaSECRET1", "api_key": "SECRET2", "api-key": "SECRET3",
               "token": "SECRET4", "access_token": "SECRET5"}  # fmt: skip
    c = client(proxy, default_query={**secrets, "model": "m"})
    QUERIES.clear()
    assert c.get("/models", cast_to=httpx.Response).content == COMPLETION
    for value in secrets.values():
        assert value.encode() in QUERIES[0], "the upstream gets the credentials"
    raw = (tmp_path / "records" / "r1" / "exchanges.jsonl").read_bytes()
    for value in [*secrets.values(), CLIENT_KEY]:
        assert value.encode() not in raw
    [(req, _)] = exchanges(tmp_path / "records", "r1")
    assert "key=REDACTED" in req["path"] and "model=m" in req["path"]
