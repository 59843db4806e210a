"""The agent side's HTTP/1.1 rules at the wire: limits, pipelining, framing, refusals."""

from __future__ import annotations

from tests.proxy.wire import FakeHandler, ManualClock, client_conn, on_loop, post, status_of

OK = [(b"Content-Type", b"application/json")]


@on_loop
async def test_a_long_request_target_gets_414():
    conn, t, h = client_conn(max_target=100)
    conn.data_received(post(b"/r/r1/v1/" + b"a" * 200))
    assert status_of(t.take()) == 414 and t.ended and h.requests == []


@on_loop
async def test_a_large_head_gets_431():
    conn, t, h = client_conn(max_head=1000)
    conn.data_received(post(extra=b"X-Big: " + b"b" * 2000 + b"\r\n"))
    assert status_of(t.take()) == 431 and t.ended and h.requests == []


@on_loop
async def test_a_head_trickled_byte_by_byte_is_capped_while_it_grows():
    conn, t, h = client_conn(max_head=1000)
    conn.data_received(b"POST /r/r1/v1/x HTTP/1.1\r\nX-Big: ")
    for _ in range(30):  # llhttp buffers an unfinished field: count the raw bytes too
        if t.ended:
            break
        conn.data_received(b"b" * 100)
    assert status_of(t.take()) == 431 and t.ended and h.requests == []


@on_loop
async def test_a_head_under_the_cap_arriving_line_by_line_is_served():
    conn, t, h = client_conn(max_head=1000)
    conn.data_received(b"POST /r/r1/v1/x HTTP/1.1\r\n")
    for i in range(7):  # 700 bytes of fields, each counted once however the reads split them
        conn.data_received(b"X-%d: " % i + b"b" * 92 + b"\r\n")
    conn.data_received(b"Content-Length: 2\r\n\r\n{}")
    assert not t.ended and len(h.requests) == 1


@on_loop
async def test_too_many_header_fields_get_431():
    conn, t, h = client_conn(max_headers=10)
    conn.data_received(post(extra=b"".join(b"X-%d: v\r\n" % i for i in range(20))))
    out = t.take()
    assert status_of(out) == 431 and b"header fields" in out and h.requests == []


@on_loop
async def test_a_head_that_does_not_arrive_in_time_is_answered_408_and_closed():
    clock = ManualClock()
    conn, t, h = client_conn(clock=clock, head_timeout=0.3)
    conn.data_received(b"POST /r/r1/v1/x HTTP/1.1\r\nHost: x\r\n")
    clock.advance(0.1)
    conn.data_received(b"X-Slow: 1\r\n")  # trickling does not reset the clock
    clock.advance(0.19)
    assert not t.ended
    clock.advance(0.02)
    assert status_of(t.take()) == 408 and t.ended and h.requests == []


@on_loop
async def test_the_head_timer_stops_once_the_head_is_whole():
    clock = ManualClock()
    conn, t, h = client_conn(clock=clock, head_timeout=0.05)
    conn.data_received(b"POST /r/r1/v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
    clock.advance(10)  # a body may take as long as it takes
    conn.data_received(b"{}")
    assert not t.ended and len(h.requests) == 1


@on_loop
async def test_each_request_head_gets_the_full_time():
    clock = ManualClock()
    conn, t, h = client_conn(clock=clock, head_timeout=0.5)
    conn.data_received(post())
    conn.respond(200, OK, b"one")
    assert status_of(t.take()) == 200
    clock.advance(0.35)
    conn.data_received(b"POST /r/r1/v1/x HTTP/1.1\r\n")  # the next head starts late
    clock.advance(0.49)  # past the first head's deadline, within this one's
    assert not t.ended
    clock.advance(0.02)
    assert status_of(t.take()) == 408 and t.ended and len(h.requests) == 1


@on_loop
async def test_connections_over_the_limit_get_503_and_are_closed():
    handler = FakeHandler(max_clients=1)
    _, first, _ = client_conn(handler)
    conn, second, _ = client_conn(handler)
    assert status_of(second.take()) == 503 and second.ended
    assert not first.ended and len(handler.conns) == 1
    conn.data_received(post())  # a refused connection handles nothing
    assert handler.requests == []


@on_loop
async def test_a_body_over_the_cap_gets_413():
    conn, t, h = client_conn(max_body=10)
    conn.data_received(post(body=b"x" * 50))
    assert status_of(t.take()) == 413 and t.ended and h.requests == []


@on_loop
async def test_pipelined_requests_stop_reading_until_their_turn():
    conn, t, h = client_conn()
    conn.data_received(post(body=b'{"n":1}') + b"POST /r/r1/v1/x HTTP/1.1\r\n")
    assert len(h.requests) == 1 and not t.reading, "the next request waits, unread"
    conn.data_received(b"Host: x\r\nContent-Length: 7\r\n\r\n" + b'{"n":2}')  # already read
    conn.respond(200, OK, b"one")
    assert [r.body for r in h.requests] == [b'{"n":1}', b'{"n":2}'] and not t.reading
    conn.respond(200, OK, b"two")
    assert t.reading and t.take().count(b"HTTP/1.1 200 OK") == 2


@on_loop
async def test_a_client_that_does_not_read_gets_nothing_more_started():
    conn, t, h = client_conn()
    conn.data_received(post(body=b'{"n":1}') + post(body=b'{"n":2}'))
    conn.pause_writing()  # its answers pile up in the transport's buffer
    assert not t.reading
    conn.respond(200, OK, b"one")
    assert len(h.requests) == 1, "no new request while the client does not read"
    conn.resume_writing()
    assert len(h.requests) == 2


@on_loop
async def test_trailer_fields_of_a_chunked_body_are_not_headers():
    conn, _, h = client_conn()
    conn.data_received(
        b"POST /r/r1/v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\nX-Trailer-Secret: s3cret\r\n\r\n"
    )
    (req,) = h.requests
    assert req.body == b"{}"
    assert all(b"secret" not in n.lower() for n, _ in req.headers), req.headers


@on_loop
async def test_a_transfer_coding_other_than_chunked_gets_501():
    for coding in (b"gzip, chunked", b"identity", b"chunked, chunked"):
        conn, t, h = client_conn()
        conn.data_received(
            b"POST /r/r1/v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: %s\r\n\r\n"
            b"2\r\n{}\r\n0\r\n\r\n" % coding
        )
        assert status_of(t.take()) in (400, 501) and t.ended and h.requests == [], coding
    conn, t, h = client_conn()
    conn.data_received(
        b"POST /r/r1/v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
    )
    assert status_of(t.take()) == 501


@on_loop
async def test_expect_continue_waits_for_a_queued_request_turn():
    conn, t, h = client_conn()
    conn.data_received(post(body=b'{"n":1}'))
    conn.data_received(
        b"POST /r/r1/v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nExpect: 100-continue\r\n\r\n"
    )
    assert t.take() == b"", "no 100 while the request ahead is in flight"
    conn.respond(200, OK, b"one")
    out = t.take()
    assert out.startswith(b"HTTP/1.1 200 OK") and out.endswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert t.reading
    conn.data_received(b'{"n":2}')
    assert [r.body for r in h.requests] == [b'{"n":1}', b'{"n":2}']


@on_loop
async def test_expect_continue_is_answered_at_once_when_idle_and_ignored_for_http10():
    conn2, t2, _ = client_conn()
    conn2.data_received(
        b"POST /r/r1/v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    )
    assert t2.take() == b"HTTP/1.1 100 Continue\r\n\r\n"
    conn3, t3, h3 = client_conn()
    conn3.data_received(
        b"POST /r/r1/v1/x HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    )
    assert t3.take() == b"", "HTTP/1.0 clients get no 100 (RFC 9110)"
    conn3.data_received(b"{}")
    assert len(h3.requests) == 1


@on_loop
async def test_upgrades_and_connect_are_refused_never_handled():
    for head in (
        b"GET /r/r1/v1/x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        b"GET /r/r1/v1/x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    ):
        conn, t, h = client_conn()
        conn.data_received(head)
        out = t.take()
        want = 405 if head.startswith(b"CONNECT") else 400
        assert status_of(out) == want and t.ended and h.requests == [], (head, out)


@on_loop
async def test_a_refusal_shuts_down_writing_then_drains_for_a_bounded_linger(monkeypatch):
    """Closing with unread bytes would make the kernel reset the connection, which can
    destroy the 431 before the client reads it: writing is shut down first, and what the
    client still sends is read and dropped for a while, within a time and a byte bound."""
    import contagent.proxy.downstream as downstream

    monkeypatch.setattr(downstream, "LINGER_BYTES", 1000)
    clock = ManualClock()
    conn, t, h = client_conn(clock=clock, max_head=1000)
    conn.data_received(b"POST /r/r1/v1/x HTTP/1.1\r\nX-Big: ")
    conn.data_received(b"b" * 2000)  # the head is still arriving
    assert status_of(t.take()) == 431 and t.eof and not t.closed
    conn.data_received(b"b" * 500)  # drained, not answered, not parsed
    assert t.take() == b"" and t.reading and not t.closed and h.requests == []
    clock.advance(downstream.LINGER_S * 0.99)
    assert not t.aborted
    clock.advance(downstream.LINGER_S * 0.02)
    assert t.aborted, "closed once the linger is over"

    conn, t, _ = client_conn(max_head=1000)
    conn.data_received(b"POST /r/r1/v1/x HTTP/1.1\r\nX-Big: ")
    conn.data_received(b"b" * 2000)
    conn.data_received(b"b" * 1500)
    assert t.aborted, "closed once the client sent more than the byte bound"


@on_loop
async def test_a_refusal_behind_a_paused_read_still_drains():
    conn, t, h = client_conn(max_target=100)
    conn.data_received(post(body=b'{"n":1}') + b"POST /r/r1/v1/x HTTP/1.1\r\n")  # pipelined
    assert len(h.requests) == 1 and not t.reading
    conn.data_received(b"Host: x\r\nContent-Length: 2\r\nTransfer-Encoding: gzip\r\n\r\n{}")
    conn.respond(200, OK, b"one")  # the request ahead is answered; then the refusal closes
    assert t.eof and t.reading, "reading resumes so the client's bytes are drained"
