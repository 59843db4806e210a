"""A reused keep-alive connection the upstream closes before any byte of the answer: the
request goes again, once, on a new connection, and is recorded once. At the wire: a raw
socket client, the proxy, and an upstream that plays given bytes per connection."""

from __future__ import annotations

from tests.proxy.helpers import exchanges, raw_address, raw_exchange, raw_post
from tests.proxy.test_wire_upstream import COMPLETION, answer
from tests.proxy.upstreams import Close, ScriptedConnections

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
OK = answer(COMPLETION)  # keep-alive: no Connection: close


def _post(proxy, n: int) -> bytes:
    """Request ``n`` (its body says which) on a connection of its own; the raw answer."""
    _, _, path = raw_address(proxy)
    body = BODY[:-1] + b',"n":%d}' % n
    return raw_exchange(proxy, raw_post(path + "/chat/completions", body, "Connection: close\r\n"))


def _outcomes(tmp_path) -> list[tuple[int, str | None]]:
    return [(r["index"], o and o["outcome"]) for r, o in exchanges(tmp_path / "records", "r1")]


def test_a_stale_pooled_connection_is_sent_again_once_on_a_new_one(
    upstream, proxy_factory, tmp_path
):
    up = upstream(ScriptedConnections([OK, Close()], [OK]))
    proxy = proxy_factory(up.url)
    assert _post(proxy, 1).startswith(b"HTTP/1.1 200 ")
    second = _post(proxy, 2)
    assert second.startswith(b"HTTP/1.1 200 ") and second.endswith(COMPLETION)
    (c0, _), (c1, lost), (c2, again) = up.requests
    assert (c0, c1, c2) == (0, 0, 1), "the lost request went again on a new connection"
    assert lost == again and b'"n":2' in again, "the same bytes, the same request"
    assert _outcomes(tmp_path) == [(0, "completed"), (1, "completed")], "recorded once"


def test_no_resend_once_any_byte_of_the_answer_arrived(upstream, proxy_factory, tmp_path):
    up = upstream(ScriptedConnections([OK, Close(b"HTTP/1.1 200 OK\r\nContent-Le")], [OK]))
    proxy = proxy_factory(up.url)
    _post(proxy, 1)
    assert _post(proxy, 2).startswith(b"HTTP/1.1 502 ")
    assert [c for c, _ in up.requests] == [0, 0] and up.connections == 1
    [_, (_, out)] = exchanges(tmp_path / "records", "r1")
    assert out is not None and out["outcome"] == "upstream_error"


def test_no_resend_when_a_new_connection_is_closed(upstream, proxy_factory, tmp_path):
    up = upstream(ScriptedConnections([Close()], [OK]))
    proxy = proxy_factory(up.url)
    assert _post(proxy, 1).startswith(b"HTTP/1.1 502 ")
    assert [c for c, _ in up.requests] == [0] and up.connections == 1
    assert _outcomes(tmp_path) == [(0, "upstream_error")]


def test_a_resend_that_is_closed_too_is_not_sent_a_third_time(upstream, proxy_factory, tmp_path):
    up = upstream(ScriptedConnections([OK, Close()], [Close()], [OK]))
    proxy = proxy_factory(up.url)
    _post(proxy, 1)
    assert _post(proxy, 2).startswith(b"HTTP/1.1 502 ")
    assert [c for c, _ in up.requests] == [0, 0, 1] and up.connections == 2
    assert _outcomes(tmp_path) == [(0, "completed"), (1, "upstream_error")]
