"""Messages-API exchanges through the recording proxy (JSON and streamed) export and validate."""

from __future__ import annotations

import asyncio
import socket

import anthropic
import httpx
import orjson
import pytest
from aiohttp import web

from contagent.rawlog.read import parse_exchanges
from contagent.rawlog.result import RolloutResult
from contagent.testing.llm_stub import Raw, Reply, StubRequest, ToolCall
from contagent.testing.messages_moves import message_events
from tests.proxy.helpers import (
    CLIENT_KEY,
    dechunk,
    exchanges,
    export_one_and_validate,
    fail_outcomes,
    raw_address,
    raw_post,
    slow_outcome_writes,
)
from tests.proxy.upstreams import AiohttpUpstream

CACHE = {"type": "ephemeral"}


def test_real_client_through_the_proxy_json_and_streamed(stub_factory, proxy_factory, tmp_path):
    """The anthropic client's calls as Claude Code makes them, recorded by the proxy: the
    streamed answer is recorded as the whole message, and the rollout exports and validates."""
    stub = stub_factory(
        [
            Reply(content=None, tool_calls=[ToolCall("Bash", {"command": "cat f"}, id="toolu_1")]),
            Reply(content="the answer is 42", reasoning_content="read it", chunks=5),
        ]
    )
    proxy = proxy_factory(stub.url)
    base = proxy.rollout_base_url("msg-run").removesuffix("/v1")  # the client adds /v1 itself
    c = anthropic.Anthropic(base_url=base, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    tools = [{"name": "Bash", "description": "sh", "input_schema": {"type": "object"}}]
    system = [{"type": "text", "text": "You are an agent.", "cache_control": CACHE}]
    task = {"role": "user", "content": [{"type": "text", "text": "read f", "cache_control": CACHE}]}
    first = c.messages.create(
        model="m", max_tokens=100, system=system, messages=[task], tools=tools
    )
    [use] = [b for b in first.content if b.type == "tool_use"]
    follow = [
        {"role": "user", "content": [{"type": "text", "text": "read f"}]},  # the marker moved on
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "42", "is_error": False,
                 "cache_control": CACHE},
            ],
        },
    ]  # fmt: skip
    with c.messages.stream(
        model="m", max_tokens=100, system=system, messages=follow, tools=tools
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.content[-1].text == "the answer is 42"
    assert stub.requests[1].json["messages"][-1]["content"][0]["content"] == "42"
    rollout = tmp_path / "records" / "msg-run"
    result = RolloutResult(rollout_id="msg-run", model="m", status="passed", passed=True,
                           reward=1.0, stop_condition="finished")  # fmt: skip
    (rollout / "result.json").write_text(result.model_dump_json())
    proxy.stop()
    records = exchanges(tmp_path / "records", "msg-run")
    assert [o["outcome"] for _, o in records] == ["completed"] * 2
    streamed = records[1][1]["response"]
    assert streamed["type"] == "message" and streamed["stop_reason"] == "end_turn"
    assert [b["type"] for b in streamed["content"]] == ["thinking", "text"]
    raw = parse_exchanges(rollout / "exchanges.jsonl", (rollout / "exchanges.jsonl").read_bytes())
    assert raw.problems == [] and all(raw.usage(i) for i in raw.indices)

    row = export_one_and_validate(tmp_path / "records", tmp_path / "out")
    assert row["training_ready"] is True, row["training_ready_reason"]
    assert [s["extends"] for s in row["steps"]] == [None, 0]
    assert row["steps"][1]["messages"][-1] == {
        "role": "tool", "tool_call_id": "toolu_1", "content": "42", "is_error": False
    }  # fmt: skip
    assert row["steps"][1]["response"]["reasoning_content"] == "read it"


def _stream_bytes() -> bytes:
    req = StubRequest(0, "POST", "/v1/messages", {}, b"{}", {"model": "m", "stream": True})
    events = message_events(req, Reply(content="hi message_stop there"), "msg_b")
    return b"".join(f"event: {name}\ndata: {data}\n\n".encode() for name, data in events)


def test_stream_burst_reaches_the_client_only_after_the_record(
    stub_factory, proxy_factory, tmp_path, monkeypatch
):
    """A whole Messages stream in one read (`message_stop` also inside a token): the client
    sees the `message_stop` event only once the outcome is on disk, and gets every byte."""
    stream = _stream_bytes()
    stub = stub_factory([Raw(stream, content_type="text/event-stream")])
    proxy = proxy_factory(stub.url)
    slow_outcome_writes(proxy, monkeypatch)
    host, port, path = raw_address(proxy)
    body = orjson.dumps({"model": "m", "max_tokens": 9, "messages": [], "stream": True})
    log = tmp_path / "records" / "r1" / "exchanges.jsonl"
    end = b"event: message_stop"
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall(raw_post(path + "/messages", body, "Connection: close\r\n"))
        raw = b""
        while not raw.endswith(b"0\r\n\r\n"):
            got = sock.recv(65536)
            if not got:
                break
            if end in raw + got and end not in raw:
                # the moment the client can see the end, the outcome is already recorded
                assert any(
                    orjson.loads(x)["type"] == "outcome" for x in log.read_bytes().splitlines()
                )
            raw += got
    assert dechunk(raw.partition(b"\r\n\r\n")[2]) == stream
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "completed" and out["response"]["stop_reason"] == "end_turn"
    assert out["response"]["content"] == [{"type": "text", "text": "hi message_stop there"}]


@pytest.mark.parametrize("split", [b"event: message_st", b'data: {"type":"message_stop"}\n'])
def test_an_end_event_split_across_reads_still_waits_for_the_record(
    upstream, proxy_factory, monkeypatch, split
):
    """`message_stop` cut by a read boundary: the outcome must still be on disk before the
    client sees the end. Here it cannot be written and the client holds part of the event,
    so the connection is cut mid-body: the client gets an error, not a finished message."""
    stream = _stream_bytes()
    at = stream.rindex(b"event: message_stop") + len(split)

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in (stream[:at], stream[at:]):
            await resp.write(piece)
            await asyncio.sleep(0.1)  # two reads on the proxy's side
        await resp.write_eof()
        return resp

    proxy = proxy_factory(upstream(AiohttpUpstream(handler)).url)
    fail_outcomes(proxy, monkeypatch)
    base = proxy.rollout_base_url("r1").removesuffix("/v1")
    c = anthropic.Anthropic(base_url=base, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    with (  # the client's transport error, as it comes
        pytest.raises(Exception, match="incomplete chunked read"),
        c.messages.stream(model="m", max_tokens=9, messages=[]) as events,
    ):
        events.get_final_message()


def test_a_stream_with_a_misplaced_event_is_an_upstream_error(
    stub_factory, proxy_factory, tmp_path
):
    stray = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"lost"}}\n\n'
    stream = _stream_bytes()
    cut = stream.index(b"event: message_delta")
    stub = stub_factory(
        [Raw(stream[:cut] + stray + stream[cut:], content_type="text/event-stream")]
    )
    proxy = proxy_factory(stub.url)
    body = {"model": "m", "max_tokens": 9, "messages": [], "stream": True}
    got = httpx.post(proxy.rollout_base_url("r1") + "/messages", json=body, timeout=20)
    assert got.content.endswith(b'data: {"type":"message_stop"}\n\n')  # relayed as sent
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error"
    assert out["error"] == "1 stream event(s) fit no place in the message"
