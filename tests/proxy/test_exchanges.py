"""Happy paths through the real openai client: what reaches the upstream and what is recorded."""

from __future__ import annotations

import hashlib
import json

import orjson

from contagent.testing.llm_stub import Error, Events, Raw, Reply, ToolCall
from tests.proxy.helpers import (
    CLIENT_KEY,
    UPSTREAM_KEY,
    client,
    dechunk,
    exchanges,
    http,
    json_stream_error,
    raw_address,
    raw_post,
    slow_outcome_writes,
)

MSGS = [{"role": "user", "content": [{"type": "text", "text": "fix the bug"}]}]
TOOLS = [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}]


def test_non_streaming_completion_is_recorded_as_sent(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="hello there")])
    proxy = proxy_factory(stub.url)
    resp = client(proxy).chat.completions.create(
        model="m", messages=MSGS, tools=TOOLS, extra_headers={"x-litellm-session-id": "conv-1"}
    )
    assert resp.choices[0].message.content == "hello there"

    [(req, out)] = exchanges(tmp_path / "records", "r1")
    wire = stub.requests[0].body
    assert req["body"] == orjson.loads(wire)
    assert req["body_bytes"] == len(wire) and req["body_sha256"] == hashlib.sha256(wire).hexdigest()
    assert req["headers"]["x-stainless-retry-count"] == "0"
    assert req["headers"]["x-litellm-session-id"] == "conv-1"
    assert req["method"] == "POST" and req["path"] == "/v1/chat/completions"
    assert req["stream"] is False and req["upstream_changes"] == []
    assert out["outcome"] == "completed" and out["status"] == 200 and out["client_status"] == 200
    assert out["response"]["choices"][0]["message"]["content"] == "hello there"
    assert out["usage"] == resp.usage.model_dump(exclude_none=True)
    assert out["finish_reasons"] == ["stop"]
    assert out["started"] <= out["first_byte"] <= out["ended"]


def test_stream_passes_through_and_is_reassembled(stub_factory, proxy_factory, tmp_path):
    args = {"command": "grep -rn 'def main' src/ | head -n 20", "timeout": 30}
    reply = Reply(
        content="Let me look.", reasoning_content="The user wants a fix.", chunks=5,
        tool_calls=[ToolCall("terminal", args, id="call_1"), ToolCall("think", {"thought": "ok"}, id="call_10")],
    )  # fmt: skip
    stub = stub_factory([reply])
    proxy = proxy_factory(stub.url)
    chunks = list(client(proxy).chat.completions.create(model="m", messages=MSGS, stream=True))
    # the client never asked for usage; the proxy did, and the client sees the usage chunk
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    got_args = "".join(
        tc.function.arguments or ""
        for c in chunks
        for ch in c.choices
        for tc in (ch.delta.tool_calls or [])
        if tc.index == 0
    )
    assert json.loads(got_args) == args

    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["stream"] is True
    assert "stream_options" not in req["body"], "the client's body is recorded, not the changed one"
    assert req["upstream_changes"] == ["stream_options.include_usage"]
    assert stub.requests[0].json["stream_options"] == {"include_usage": True}
    assert out["outcome"] == "completed"
    msg = out["response"]["choices"][0]["message"]
    assert msg["content"] == "Let me look."
    assert msg["reasoning_content"] == "The user wants a fix."
    assert [t["id"] for t in msg["tool_calls"]] == ["call_1", "call_10"]
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == args
    assert msg["tool_calls"][1]["function"] == {"name": "think", "arguments": '{"thought":"ok"}'}
    assert out["response"]["object"] == "chat.completion"
    assert out["finish_reasons"] == ["tool_calls"]
    assert out["usage"] == chunks[-1].usage.model_dump(exclude_none=True)
    assert out["stream_events"][-1] == "[DONE]"
    assert len(out["stream_events"]) == len(chunks) + 1


def test_client_usage_request_is_not_changed(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="x")])
    proxy = proxy_factory(stub.url)
    body = {
        "model": "m",
        "messages": MSGS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    list(client(proxy).chat.completions.create(**body))
    [(req, _)] = exchanges(tmp_path / "records", "r1")
    assert req["upstream_changes"] == []
    assert (
        stub.requests[0].body == orjson.dumps(req["body"])
        or orjson.loads(stub.requests[0].body) == req["body"]
    )


def test_length_finish_is_incomplete(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory(
        [
            Reply(content="truncat", finish_reason="length"),
            Reply(content="cut", finish_reason="length"),
        ]
    )
    proxy = proxy_factory(stub.url)
    c = client(proxy)
    c.chat.completions.create(model="m", messages=MSGS)
    list(c.chat.completions.create(model="m", messages=MSGS, stream=True))
    pairs = exchanges(tmp_path / "records", "r1")
    assert [o["outcome"] for _, o in pairs] == ["incomplete", "incomplete"]
    assert all(o["finish_reasons"] == ["length"] for _, o in pairs)
    assert "length" in pairs[0][1]["error"]


def test_models_and_unknown_routes_are_forwarded_and_recorded(
    stub_factory, proxy_factory, tmp_path
):
    stub = stub_factory([Error(404, {"error": {"message": "no such route"}})])
    proxy = proxy_factory(stub.url)
    assert [m.id for m in client(proxy).models.list()] == ["stub"]
    r = http("POST", proxy.rollout_base_url("r1") + "/no/such/thing?x=1", json={"a": 1})
    assert r.status_code == 404 and r.json() == {"error": {"message": "no such route"}}
    (mreq, mout), (ureq, uout) = exchanges(tmp_path / "records", "r1")
    assert mreq["method"] == "GET" and mreq["path"] == "/v1/models" and mreq["body"] is None
    assert mreq["body_bytes"] == 0
    assert mout["outcome"] == "completed" and mout["response"]["data"][0]["id"] == "stub"
    assert (
        ureq["path"] == "/v1/no/such/thing?x=1" and stub.requests[1].path == "/v1/no/such/thing?x=1"
    )
    assert uout["outcome"] == "http_error" and uout["status"] == 404


def test_responses_api_stream_takes_the_completed_response(stub_factory, proxy_factory, tmp_path):
    final = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
        "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
    }
    events = [
        json.dumps(
            {
                "type": "response.created",
                "response": {**final, "status": "in_progress", "output": []},
            }
        ),
        json.dumps({"type": "response.output_text.delta", "delta": "hi"}),
        json.dumps({"type": "response.completed", "response": final}),
    ]
    stub = stub_factory([Events(events)])
    proxy = proxy_factory(stub.url)
    got = list(client(proxy).responses.create(model="m", input="hello", stream=True))
    assert got[-1].type == "response.completed"
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["path"] == "/v1/responses" and req["upstream_changes"] == []
    assert (
        out["outcome"] == "completed"
        and out["response"] == final
        and out["usage"] == final["usage"]
    )


def test_legacy_completions_stream_is_forwarded_reassembled_and_asked_for_usage(
    stub_factory, proxy_factory, tmp_path
):
    """``/v1/completions`` is one of the routes the issue names: usage is requested on its
    streams too, and the text is reassembled into the outcome."""
    chunks = [
        {"id": "t", "object": "text_completion", "created": 0, "model": "m",
         "choices": [{"index": 0, "text": t, "finish_reason": f, "logprobs": None}]}
        for t, f in (("Hel", None), ("lo", "stop"))
    ]  # fmt: skip
    usage = {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    final = {"id": "t", "object": "text_completion", "created": 0, "model": "m", "choices": [],
             "usage": usage}  # fmt: skip
    stub = stub_factory([Events([json.dumps(c) for c in [*chunks, final]] + ["[DONE]"])])
    proxy = proxy_factory(stub.url)
    got = list(client(proxy).completions.create(model="m", prompt="say hello", stream=True))
    assert "".join(c.choices[0].text for c in got if c.choices) == "Hello"
    assert stub.requests[0].json["stream_options"] == {"include_usage": True}
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["path"] == "/v1/completions" and req["body"]["prompt"] == "say hello"
    assert req["upstream_changes"] == ["stream_options.include_usage"]
    assert "stream_options" not in req["body"]  # the body as the client sent it
    assert out["outcome"] == "completed" and out["usage"] == usage
    assert out["response"]["choices"] == [{"index": 0, "text": "Hello", "finish_reason": "stop"}]


def test_secrets_never_recorded_and_upstream_gets_its_own_key(
    stub_factory, proxy_factory, tmp_path
):
    stub = stub_factory([Reply(), Reply(), Error(401, {"error": {"message": "bad key"}})])
    proxy = proxy_factory(stub.url)
    c = client(
        proxy, default_headers={"api-key": CLIENT_KEY, "x-api-key": CLIENT_KEY, "Cookie": "s=1"}
    )
    json_stream_error(c, MSGS)
    for req in stub.requests:
        assert req.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert CLIENT_KEY not in json.dumps(req.headers)
    raw = b"".join(p.read_bytes() for p in (tmp_path / "records").rglob("*") if p.is_file())
    assert raw.count(b'"type":"request"') == 3
    for secret in (CLIENT_KEY, UPSTREAM_KEY, "Bearer"):
        assert secret.encode() not in raw


def test_without_upstream_key_client_credentials_are_still_stripped(stub_factory, proxy_factory):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url, upstream_api_key=None)
    client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert "Authorization" not in stub.requests[0].headers


def test_unsafe_rollout_id_is_refused(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    for rid in ("..", "a%2Fb", ".hidden", "a%20b", "%2e%2e", "x" * 201):
        r = http("POST", f"{proxy.url}/r/{rid}/v1/chat/completions", json={"model": "m"})
        assert r.status_code == 400, rid
        assert "rollout id" in r.json()["error"]["message"]
    assert http("GET", f"{proxy.url}/v1/models").status_code == 404
    assert stub.requests == []
    assert not (tmp_path / "records").exists() or not any((tmp_path / "records").iterdir())


def test_non_json_request_body_is_recorded_as_text(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    r = http(
        "POST",
        proxy.rollout_base_url("r1") + "/chat/completions",
        content=b"not json \xff",
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 200
    [(req, _)] = exchanges(tmp_path / "records", "r1")
    assert req["body"] is None and req["body_text"] == "not json \ufffd" and req["body_bytes"] == 10
    assert stub.requests[0].body == b"not json \xff"


def test_stream_burst_reaches_the_client_only_after_the_record(
    stub_factory, proxy_factory, tmp_path, monkeypatch
):
    """A whole stream arriving in one read (``[DONE]`` also inside a token): the client
    sees ``[DONE]`` only once the outcome is on disk, and gets every byte."""
    import socket

    events = [
        b'data: {"id":"b","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}\n\n',
        b'data: {"id":"b","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":" [DONE] there"},"finish_reason":"stop"}]}\n\n',
    ]
    stream = b"".join(events) + b"data: [DONE]\n\n"
    stub = stub_factory([Raw(stream, content_type="text/event-stream")])
    proxy = proxy_factory(stub.url)
    slow_outcome_writes(proxy, monkeypatch)
    host, port, path = raw_address(proxy)
    body = orjson.dumps({"model": "m", "messages": MSGS, "stream": True})
    log = tmp_path / "records" / "r1" / "exchanges.jsonl"
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall(raw_post(path + "/chat/completions", body, "Connection: close\r\n"))
        raw = b""
        while b"0\r\n\r\n" not in raw.partition(b"[DONE]")[2] or not raw.endswith(b"0\r\n\r\n"):
            got = sock.recv(65536)
            if not got:
                break
            if b"data: [DONE]" in raw + got and b"data: [DONE]" not in raw:
                # the moment the client can see the end, the outcome is already recorded
                assert any(
                    orjson.loads(x)["type"] == "outcome" for x in log.read_bytes().splitlines()
                )
            raw += got
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" in head.lower()
    assert dechunk(rest) == stream
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "completed"
    assert out["response"]["choices"][0]["message"]["content"] == "hi [DONE] there"


def test_pinned_proxy_serves_only_its_rollout_and_clients(stub_factory, proxy_factory, tmp_path):
    """A runner's per-rollout proxy: another rollout id or another network gets 403, unrecorded."""
    import openai
    import pytest

    stub = stub_factory([Reply(content="ok")])
    mine = proxy_factory(stub.url, only_rollout="mine", allowed_clients="127.0.0.0/8")
    assert client(mine, "mine").chat.completions.create(model="m", messages=MSGS).choices
    with pytest.raises(openai.PermissionDeniedError):
        client(mine, "theirs").chat.completions.create(model="m", messages=MSGS)
    far = proxy_factory(stub.url, allowed_clients="10.99.0.0/16")
    with pytest.raises(openai.PermissionDeniedError):
        client(far, "mine").chat.completions.create(model="m", messages=MSGS)
    assert not (tmp_path / "records" / "theirs").exists()
    assert len(exchanges(tmp_path / "records", "mine")) == 1
    assert len(stub.requests) == 1


def test_bodies_are_recorded_as_their_wire_bytes_on_one_line(stub_factory, proxy_factory, tmp_path):
    """Compact JSON lands in the log byte for byte; pretty-printed JSON (raw newlines) parsed."""
    stub = stub_factory([Reply(content="a"), Reply(content="b")])
    proxy = proxy_factory(stub.url)
    url = proxy.rollout_base_url("r1") + "/chat/completions"
    compact = b'{"model":"m",  "messages":[{"role":"user","content":"q\\u00e9 \\"x\\"\\n"}]}'
    pretty = json.dumps({"model": "m", "messages": MSGS}, indent=2).encode()
    for body in (compact, pretty):
        headers = {"content-type": "application/json"}
        assert http("POST", url, content=body, headers=headers).status_code == 200
    log = (tmp_path / "records" / "r1" / "exchanges.jsonl").read_bytes()
    assert len(log.splitlines()) == 4, "one line per record, whatever the body's whitespace"
    assert b'"body":' + compact + b',"body_text"' in log
    (r0, o0), (r1, o1) = exchanges(tmp_path / "records", "r1")
    assert r0["body"] == orjson.loads(compact) and r1["body"] == orjson.loads(pretty)
    assert [o["response"]["choices"][0]["message"]["content"] for o in (o0, o1)] == ["a", "b"]
