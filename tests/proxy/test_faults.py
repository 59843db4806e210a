"""Every fault is recorded with its own outcome and never passed off as success."""

from __future__ import annotations

import time

import openai
import pytest

from contagent.testing.llm_stub import Error, Raw, Reply, Reset
from tests.helpers import free_port
from tests.proxy.helpers import client, exchanges, fail_outcomes, http, wait_for

MSGS = [{"role": "user", "content": "hi"}]


def test_upstream_refused_gives_502(proxy_factory, tmp_path):
    proxy = proxy_factory(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(openai.InternalServerError) as err:
        client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert err.value.status_code == 502
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert (
        out["outcome"] == "upstream_error" and out["status"] is None and out["client_status"] == 502
    )
    assert "unreachable" in out["error"] and out["first_byte"] is None


def test_upstream_reset_gives_502(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reset()])
    proxy = proxy_factory(stub.url)
    with pytest.raises(openai.InternalServerError) as err:
        client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert err.value.status_code == 502
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and out["client_status"] == 502


def test_upstream_timeout_gives_504(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(delay=2.0)])
    proxy = proxy_factory(stub.url, upstream_timeout=0.3)
    with pytest.raises(openai.APIStatusError) as err:
        client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert err.value.status_code == 504
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert (
        out["outcome"] == "upstream_error"
        and out["client_status"] == 504
        and "timed out" in out["error"]
    )
    wait_for(lambda: stub.cancelled == [0])  # the proxy gave up on it: the upstream must see that


def test_upstream_timeout_mid_stream_is_an_error_event(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory(
        [
            Reply(content="abcdef", chunks=6, chunk_delay=0.05),
            Reply(content="abcdef", chunks=3, chunk_delay=4.0),
        ]
    )
    # gaps a twentieth of the timeout, a stall of twice it: a loaded machine moves neither
    proxy = proxy_factory(stub.url, upstream_timeout=2.0)
    c = client(proxy)
    assert (
        len(list(c.chat.completions.create(model="m", messages=MSGS, stream=True))) > 6
    )  # slow but steady is fine
    got = []
    with pytest.raises(openai.APIError, match="timed out"):
        for chunk in c.chat.completions.create(model="m", messages=MSGS, stream=True):
            got.append(chunk)
    assert got, "what arrived before the stall reached the client"
    (_, ok), (_, out) = exchanges(tmp_path / "records", "r1")
    assert ok["outcome"] == "completed"
    assert out["outcome"] == "upstream_error" and out["status"] == 200
    assert out["stream_events"] and "[DONE]" not in out["stream_events"]


@pytest.mark.parametrize("status", [400, 429, 500, 503])
def test_upstream_http_errors_pass_through_verbatim(stub_factory, proxy_factory, tmp_path, status):
    body = b'{"error": {"message": "nope", "type": "x", "code": %d}, "extra": [1, 2]}' % status
    stub = stub_factory([Error(status, body), Error(status, body)])
    proxy = proxy_factory(stub.url)
    r = http(
        "POST",
        proxy.rollout_base_url("r1") + "/chat/completions",
        json={"model": "m", "messages": MSGS},
    )
    assert r.status_code == status and r.content == body
    with pytest.raises(openai.APIStatusError) as err:
        client(proxy).chat.completions.create(model="m", messages=MSGS, stream=True)
    assert err.value.status_code == status
    for _, out in exchanges(tmp_path / "records", "r1"):
        assert out["outcome"] == "http_error" and out["status"] == status == out["client_status"]
        assert out["response"] == {
            "error": {"message": "nope", "type": "x", "code": status},
            "extra": [1, 2],
        }


def test_stream_cut_midway_is_an_error_for_client_and_record(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="one two three four five", chunks=5, cut_after=3)])
    proxy = proxy_factory(stub.url)
    got = []
    with pytest.raises(openai.APIError, match="stream broke"):
        for chunk in client(proxy).chat.completions.create(model="m", messages=MSGS, stream=True):
            got.append(chunk)
    assert len(got) == 3
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and "broke" in out["error"]
    assert len(out["stream_events"]) == 3
    arrived = "".join(c.choices[0].delta.content or "" for c in got)
    assert arrived and out["response"]["choices"][0]["message"]["content"] == arrived
    assert out["finish_reasons"] == [None]


def test_malformed_upstream_json_is_recorded_raw(stub_factory, proxy_factory, tmp_path):
    body = b'{"id": "x", "choices": [{"message": {"content": "hal'
    stub = stub_factory([Raw(body)])
    proxy = proxy_factory(stub.url)
    r = http(
        "POST",
        proxy.rollout_base_url("r1") + "/chat/completions",
        json={"model": "m", "messages": MSGS},
    )
    assert r.status_code == 200 and r.content == body  # passed on as is
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and out["response"] is None
    assert out["response_text"] == body.decode()


def test_malformed_stream_event_is_a_fault(stub_factory, proxy_factory, tmp_path):
    from contagent.testing.llm_stub import Events

    stub = stub_factory(
        [Events(['{"id":"a","object":"chat.completion.chunk","choices":[]}', "{broken", "[DONE]"])]
    )
    proxy = proxy_factory(stub.url)
    r = http(
        "POST",
        proxy.rollout_base_url("r1") + "/chat/completions",
        json={"model": "m", "stream": True},
    )
    assert r.status_code == 200 and b"{broken" in r.content
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and "not valid JSON" in out["error"]
    assert out["stream_events"][1] == "{broken"


def test_client_disconnect_mid_stream_cancels_upstream(stub_factory, proxy_factory, tmp_path):
    # a 10 s stream: cancelled at once and cancelled at its end lie far apart under any load
    stub = stub_factory([Reply(content="a" * 50, chunks=50, chunk_delay=0.2)])
    proxy = proxy_factory(stub.url)
    stream = client(proxy).chat.completions.create(model="m", messages=MSGS, stream=True)
    it = iter(stream)
    for _ in range(3):
        next(it)
    stream.close()
    t0 = time.monotonic()
    wait_for(lambda: stub.cancelled == [0], timeout=8.0)
    assert time.monotonic() - t0 < 5.0, (
        "upstream must be cancelled at once, not at the end of the stream"
    )
    wait_for(lambda: b'"type":"outcome"' in (tmp_path / "records/r1/exchanges.jsonl").read_bytes())
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "abandoned"
    assert 3 <= len(out["stream_events"]) < 50
    assert out["response"]["choices"][0]["message"]["content"].startswith("aa")


def test_client_disconnect_while_waiting_cancels_upstream(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(delay=5.0)])
    proxy = proxy_factory(stub.url)
    with pytest.raises(openai.APITimeoutError):
        client(proxy, timeout=0.3).chat.completions.create(model="m", messages=MSGS)
    wait_for(lambda: stub.cancelled == [0], timeout=4.5)  # before the stub would answer
    wait_for(lambda: b'"type":"outcome"' in (tmp_path / "records/r1/exchanges.jsonl").read_bytes())
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "abandoned" and out["status"] is None and out["response"] is None


def test_retries_are_the_agents_and_all_recorded(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Error(503), Reply(content="second try")])
    proxy = proxy_factory(stub.url)
    resp = client(proxy, max_retries=1).chat.completions.create(model="m", messages=MSGS)
    assert resp.choices[0].message.content == "second try"
    (r0, o0), (r1, o1) = exchanges(tmp_path / "records", "r1")
    assert r0["body_sha256"] == r1["body_sha256"]
    assert r1["headers"]["x-stainless-retry-count"] == "1"
    assert (o0["outcome"], o1["outcome"]) == ("http_error", "completed")
    assert len(stub.requests) == 2  # the proxy itself never retried


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_whose_outcome_cannot_be_recorded_is_not_passed_on(
    stub_factory, proxy_factory, tmp_path, monkeypatch, stream
):
    """The agent must never hold an answer the log lacks: it gets an error instead, and the
    connection stays usable for the next request."""
    stub = stub_factory(
        [Reply(content="unrecorded", chunks=4, chunk_delay=0.02), Reply(content="recorded")]
    )
    proxy = proxy_factory(stub.url)
    flag = fail_outcomes(proxy, monkeypatch)
    c = client(proxy)
    if stream:
        seen = []
        with pytest.raises(openai.APIError, match="could not record the response"):
            for chunk in c.chat.completions.create(model="m", messages=MSGS, stream=True):
                seen.append(chunk)
        assert seen, "what arrived before the end was relayed as it came"
    else:
        with pytest.raises(openai.InternalServerError, match="could not record the response"):
            c.chat.completions.create(model="m", messages=MSGS)
    flag["on"] = False
    again = c.chat.completions.create(model="m", messages=MSGS)  # the same client carries on
    assert again.choices[0].message.content == "recorded"
    pairs = exchanges(tmp_path / "records", "r1")
    assert [(r["index"], o and o["outcome"]) for r, o in pairs] == [(0, None), (1, "completed")]
    assert len(stub.requests) == 2  # the first did go upstream: it was recorded first


_ONE_PIECE_STREAM = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def test_a_withheld_stream_end_does_not_pool_its_dropped_connection(
    stub_factory, proxy_factory, tmp_path, monkeypatch
):
    """The whole stream in one read, its end withheld (outcome not written): the upstream
    connection it dropped must not be handed to the request queued behind it."""
    import threading

    stub = stub_factory(
        [Raw(_ONE_PIECE_STREAM, content_type="text/event-stream", delay=0.5), Reply(content="next")]
    )
    proxy = proxy_factory(stub.url, max_connections=1)
    fail_outcomes(proxy, monkeypatch, only="r1")
    errors: list[Exception] = []

    def first() -> None:
        try:
            list(client(proxy, "r1").chat.completions.create(model="m", messages=MSGS, stream=True))
        except openai.APIError as exc:
            errors.append(exc)

    t = threading.Thread(target=first)
    t.start()
    wait_for(lambda: len(stub.requests) == 1)
    answer = client(proxy, "r2").chat.completions.create(model="m", messages=MSGS)  # queued
    t.join(10)
    assert answer.choices[0].message.content == "next"
    assert errors and "could not record the response" in str(errors[0])
    [(_, out)] = exchanges(tmp_path / "records", "r2")
    assert out["outcome"] == "completed"
