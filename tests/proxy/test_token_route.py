"""The token route: Messages and Responses requests served from the stub's chat completions,
with token data recorded, answered to the real clients, exported as token samples."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading

import anthropic
import httpx
import openai
import orjson
import pytest
from aiohttp import web

from contagent.errors import ContagentError
from contagent.proxy.sampling_options import SamplingPolicy, parse_sampling
from contagent.proxy.token_route import RouteChoice, check_route_mode
from contagent.testing.llm_stub import Reply, StubRequest, ToolCall, stream_payloads
from tests.helpers import cli
from tests.proxy.helpers import (
    CLIENT_KEY,
    exchanges,
    export_one_and_validate,
    raw_address,
    raw_post,
    rewrite_record,
    write_result,
)
from tests.proxy.upstreams import AiohttpUpstream

VLLM = {
    "name": "vllm",
    "version": "0.32.0",
    "logprobs_mode": "processed_logprobs",
    "inline_system": "in_place",
    "thinking_off_effort": "none",
    "max_model_len": 32768,
}
#: Claude Code sends no sampling: the proxy's defaults say what the server sampled with
DEFAULTS = SamplingPolicy(defaults=parse_sampling("temperature=0.7", "--sampling-defaults"))
#: the arguments as the translation writes a tool_use's input back (json.dumps): the next
#: prompt then extends this one, as the stub's template renders them
ARGS = '{"command": "cat f"}'
TOOLS = [{"name": "Bash", "description": "sh", "input_schema": {"type": "object"}}]


def _messages_rollout(stub_factory, proxy_factory, tmp_path, stream: bool, **proxy_kw):
    stub = stub_factory(
        [
            Reply(content=None, tool_calls=[ToolCall("Bash", ARGS, id="t1")]),
            Reply(content="the answer is 42", reasoning_content="read it", chunks=5),
        ]
    )
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM), sampling=DEFAULTS, **proxy_kw)
    base = proxy.rollout_base_url("m1").removesuffix("/v1")
    c = anthropic.Anthropic(base_url=base, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    task = {"role": "user", "content": "read f"}
    kw = {"model": "m", "max_tokens": 100, "system": "You are an agent.", "tools": TOOLS}
    first = c.messages.create(messages=[task], **kw)
    [use] = [b for b in first.content if b.type == "tool_use"]
    follow = [
        task,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42"}],
        },
    ]
    if stream:
        with c.messages.stream(messages=follow, **kw) as s:
            final = s.get_final_message()
    else:
        final = c.messages.create(messages=follow, **kw)
    proxy.stop()
    return stub, final


@pytest.mark.parametrize("stream", [False, True])
def test_messages_go_upstream_as_chat_and_export_token_samples(
    stub_factory, proxy_factory, tmp_path, stream
):
    stub, final = _messages_rollout(stub_factory, proxy_factory, tmp_path, stream)
    assert final.stop_reason == "end_turn" and final.content[-1].text == "the answer is 42"
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert [r.path for r in stub.requests] == ["/v1/chat/completions"] * 2
    sent = stub.requests[1].json
    assert sent["return_token_ids"] is True and sent["logprobs"] is True
    assert sent["messages"][0] == {"role": "system", "content": "You are an agent."}
    assert sent["messages"][-1]["role"] == "tool"
    records = tmp_path / "records"
    pairs = exchanges(records, "m1")
    assert [o["outcome"] for _, o in pairs] == ["completed"] * 2
    req, out = pairs[1]
    assert req["path"] == "/v1/messages" and req["upstream"]["path"] == "/v1/chat/completions"
    assert req["upstream_changes"][-3:] == ["return_token_ids", "logprobs", "top_logprobs"]
    assert out["response"]["type"] == "message"
    assert out["upstream"]["response"]["object"] == "chat.completion"
    assert out["tokens"]["prompt_token_ids"]
    assert len(out["drawn"]["signature"]) == 1
    assert out["response"]["content"][0]["signature"] == out["drawn"]["signature"][0]
    if stream:
        assert orjson.loads(out["stream_events"][0])["type"] == "message_start"
        assert out["upstream"]["stream_events"][-1] == "[DONE]"
    write_result(records, "m1")
    row = export_one_and_validate(records, tmp_path / "out")
    assert row["training_ready"] is True, row["training_ready_reason"]
    assert row["tokens"]["kinds"] == [] and row["tokens"]["samples"] == [1]
    assert row["steps"][1]["response"]["reasoning_content"] == "read it"


def _responses_rollout(stub_factory, proxy_factory, stream: bool):
    stub = stub_factory(
        [
            Reply(content=None, tool_calls=[ToolCall("shell", ARGS, id="call_1")]),
            Reply(content="done: 42", chunks=4),
        ]
    )
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM), sampling=DEFAULTS)
    c = openai.OpenAI(base_url=proxy.rollout_base_url("c1"), api_key=CLIENT_KEY, max_retries=0)
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
    kw = {"model": "m", "instructions": "You are Codex.", "tools": tools}
    task = {"role": "user", "content": "read f"}
    first = c.responses.create(input=[task], **kw)
    [call] = [item for item in first.output if item.type == "function_call"]
    follow = [task, call.model_dump(exclude_none=True),
              {"type": "function_call_output", "call_id": call.call_id, "output": "42"}]  # fmt: skip
    if stream:
        with c.responses.stream(input=follow, **kw) as s:
            final = s.get_final_response()
    else:
        final = c.responses.create(input=follow, **kw)
    proxy.stop()
    return stub, final


@pytest.mark.parametrize("stream", [False, True])
def test_responses_go_upstream_as_chat_and_export_token_samples(
    stub_factory, proxy_factory, tmp_path, stream
):
    stub, final = _responses_rollout(stub_factory, proxy_factory, stream)
    assert final.output_text == "done: 42" and final.status == "completed"
    # as vLLM echoes it: what the context leaves after the prompt
    assert final.max_output_tokens == VLLM["max_model_len"] - final.usage.input_tokens
    # Codex sends no temperature: the echo is the one the request record says was sampled with
    assert final.temperature == 0.7 and final.top_p == 1.0
    assert [r.path for r in stub.requests] == ["/v1/chat/completions"] * 2
    records = tmp_path / "records"
    req, out = exchanges(records, "c1")[1]
    assert req["upstream"]["body"]["messages"][0] == {"role": "system", "content": "You are Codex."}
    assert out["response"]["object"] == "response" and out["response"]["id"] == final.id
    assert out["drawn"]["response_id"] == [final.id]
    write_result(records, "c1")
    row = export_one_and_validate(records, tmp_path / "out")
    assert row["training_ready"] is True, row["training_ready_reason"]
    assert row["tokens"]["kinds"] == [] and row["tokens"]["samples"] == [1]


#: what the translation asks of a stream: usage on every chunk, which its events are built from
USAGE = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def test_a_translated_stream_is_relayed_as_the_chunks_arrive(upstream, proxy_factory, tmp_path):
    """The client gets ``message_start`` while the upstream still holds the rest of its
    stream: it is waiting for the test to say so, which the test does only then."""
    release = threading.Event()
    chunks = stream_payloads(
        StubRequest(0, "POST", "/v1/chat/completions", {}, b"", {"stream": True, **USAGE}),
        Reply(content="hello there", chunks=2), "chatcmpl-1",
    )  # fmt: skip

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(f"data: {chunks[0]}\n\n".encode())
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 20)
        for chunk in chunks[1:]:
            await resp.write(f"data: {chunk}\n\n".encode())
        await resp.write_eof()
        return resp

    proxy = proxy_factory(upstream(AiohttpUpstream(handler)).url, messages_route="chat")
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}],
            "stream": True}  # fmt: skip
    url = proxy.rollout_base_url("r1") + "/messages"
    with httpx.stream("POST", url, json=body, timeout=20) as resp:
        lines = resp.iter_lines()
        first = next(lines)
        assert first == "event: message_start" and not release.is_set()
        release.set()
        rest = list(lines)
    assert "event: message_stop" in rest
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "completed" and out["tokens"] is None  # tokens were not asked for
    assert out["response"]["content"] == [{"type": "text", "text": "hello there"}]


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}


@pytest.mark.parametrize(
    ("route", "body", "said"),
    [
        ("/messages", {"model": "m", "max_tokens": 9,
                       "messages": [{"role": "user", "content": [IMAGE]}]}, "image"),
        ("/messages", {"model": "m", "max_tokens": 9,
                       "messages": [{"role": "user", "content": [{"type": "sparkle"}]}]},
         "sparkle"),
        ("/responses", {"model": "m", "input": "hi", "previous_response_id": "resp_1"},
         "previous_response_id: the proxy stores no responses"),
    ],
)  # fmt: skip
def test_what_the_translation_cannot_carry_is_a_one_line_400(
    stub_factory, proxy_factory, tmp_path, route, body, said
):
    stub = stub_factory([Reply(content="never")])
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM))
    host, port, path = raw_address(proxy)
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall(raw_post(path + route, orjson.dumps(body), "Connection: close\r\n"))
        raw = b""
        while got := sock.recv(65536):
            raw += got
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"\n" not in payload and said.encode() in payload
    error = orjson.loads(payload)
    assert (error.get("type") == "error") == (route == "/messages")  # each API's error shape
    assert stub.requests == []  # nothing went upstream
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert "upstream" not in req and req["body"] == body
    assert out["outcome"] == "http_error" and out["client_status"] == 400
    assert out["status"] is None and out["error"].startswith("not translated: ")


def test_an_inline_system_message_is_refused_while_the_template_is_unknown(
    stub_factory, proxy_factory, tmp_path
):
    stub = stub_factory([Reply(content="never")])
    server = {k: v for k, v in VLLM.items() if k != "inline_system"}
    proxy = proxy_factory(stub.url, tokens=True, server=server)
    turns = [{"role": "user", "content": "a"}, {"role": "system", "content": "b"},
             {"role": "user", "content": "c"}]  # fmt: skip
    body = {"model": "m", "max_tokens": 9, "messages": turns}
    got = httpx.post(proxy.rollout_base_url("r1") + "/messages", json=body, timeout=20)
    assert got.status_code == 400 and "system message inside messages" in got.text
    assert stub.requests == []


def test_count_tokens_and_native_routes_pass_through(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="native")])
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM), messages_route="native")
    base = proxy.rollout_base_url("r1")
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    counted = httpx.post(base + "/messages/count_tokens", json=body, timeout=20)
    answer = httpx.post(base + "/messages", json=body, timeout=20)
    assert counted.status_code == 200 and answer.json()["content"][0]["text"] == "native"
    assert [r.path for r in stub.requests] == ["/v1/messages/count_tokens", "/v1/messages"]
    assert all("upstream" not in req for req, _ in exchanges(tmp_path / "records", "r1"))


@pytest.mark.parametrize(
    ("tokens", "messages", "line"),
    [
        (True, None, "tokens: recorded on chat, messages (via chat), responses (via chat) (x)"),
        (True, "native", "tokens: recorded on chat, responses (via chat) (x)"),
        (False, None, "tokens: not recorded (x)"),
        (False, "chat", "tokens: not recorded (x); messages (via chat)"),
    ],
)
def test_the_start_line_says_how_each_api_is_served(tokens, messages, line):
    said = "tokens: recorded (x)" if tokens else "tokens: not recorded (x)"
    assert RouteChoice(messages, None).start_line(said, tokens) == line


def test_a_route_mode_is_checked():
    with pytest.raises(ContagentError, match="--messages-route 'both': use one of native, chat"):
        check_route_mode("both", "--messages-route")


def _text_of(event: str) -> str:
    """The answer text a stream event adds (a chat chunk's or a Messages text delta's)."""
    try:
        data = orjson.loads(event)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(data, dict):
        return ""
    choices = data.get("choices") or [{}]
    delta = data.get("delta") or choices[0].get("delta") or {}
    return str(delta.get("content") or delta.get("text") or "")


def _say_43(events: list[str]) -> None:
    """Change the streamed answer's 42 to 43 where the text says it (an event's id or
    timestamp may hold the digits too, and changing those would change no answer)."""
    n = next(n for n, e in enumerate(events) if "42" in _text_of(e))
    events[n] = events[n].replace("42", "43")
    assert "43" in _text_of(events[n])


def _client_side(out: dict) -> None:
    if out["stream_events"]:
        _say_43(out["stream_events"])
    out["response"]["content"][-1]["text"] = "the answer is 43"


def _upstream_side(out: dict) -> None:
    up = out["upstream"]
    if up["stream_events"]:
        _say_43(up["stream_events"])
    up["response"]["choices"][0]["message"]["content"] = "the answer is 43"


def _signature(out: dict) -> None:
    out["drawn"]["signature"] = ["0" * 32]


def _chat_request(req: dict) -> None:
    req["upstream"]["body"]["max_tokens"] = 7


MUTATIONS = {
    "client answer": ("outcome", _client_side),
    "upstream answer": ("outcome", _upstream_side),
    "drawn signature": ("outcome", _signature),
    "chat request": ("request", _chat_request),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_changed_side_of_a_translated_exchange_is_caught(
    stub_factory, proxy_factory, tmp_path, stream, mutation
):
    """Either side changed in the raw log: the export rebuilds the client's side from the
    upstream's and finds them apart (not training-ready, naming the exchange); a row that
    still claims readiness for the changed log is a violation for validate."""
    _messages_rollout(stub_factory, proxy_factory, tmp_path, stream)
    records = tmp_path / "records"
    write_result(records, "m1")
    log = records / "m1" / "exchanges.jsonl"
    good = export_one_and_validate(records, tmp_path / "good")
    assert good["training_ready"] is True
    kind, change = MUTATIONS[mutation]
    rewrite_record(log, 1, kind, change)
    row = export_one_and_validate(records, tmp_path / "bad")
    assert row["not_ready_kinds"] == ["translation_mismatch"]
    assert row["training_ready_reason"].startswith("exchange 1: ")
    # the good row, pointed at the changed log as if the export had missed it
    good["raw_log"]["sha256"] = hashlib.sha256(log.read_bytes()).hexdigest()
    good["raw_log"]["bytes"] = log.stat().st_size
    (tmp_path / "good" / "results.jsonl").write_bytes(orjson.dumps(good) + b"\n")
    found = cli("validate", str(tmp_path / "good" / "results.jsonl"), "--json", timeout=120)
    reasons = [v["reason"] for v in json.loads(found.stdout)["violations"]]
    assert found.returncode != 0 and any("exchange 1: " in r for r in reasons), reasons


def _prime_sft_rows(out) -> list[dict]:
    """The Prime-SFT rows of an export (at least one)."""
    import pyarrow.parquet as pq

    files = sorted((out / "prime-sft").rglob("*.parquet"))
    rows = [row for f in files for row in pq.read_table(f).to_pylist()]
    assert rows
    return rows


def test_the_conversation_exports_as_on_the_native_route(stub_factory, proxy_factory, tmp_path):
    """The same conversation recorded on either route gives the same rows and SFT data: they
    see the conversation the agent had, in its own API."""
    got = {}
    for route in ("native", "chat"):
        root = tmp_path / route
        root.mkdir()
        proxy_kw = {"record_dir": root / "records", "messages_route": route}
        _messages_rollout(stub_factory, proxy_factory, root, stream=True, **proxy_kw)
        write_result(root / "records", "m1")
        row = export_one_and_validate(root / "records", root / "out")
        got[route] = (row, _prime_sft_rows(root / "out"))
    (native, native_formats), (chat, chat_formats) = got["native"], got["chat"]
    assert chat["training_ready"] and native["training_ready"]
    steps = [[{k: s[k] for k in ("messages", "response", "finish_reason")} for s in r["steps"]]
             for r in (native, chat)]  # fmt: skip
    assert steps[0] == steps[1] and native["tools"] == chat["tools"]
    # the stub counts a Messages prompt its own way: real servers count the one prompt alike
    counts = {"prompt_tokens", "completion_tokens", "total_tokens"}
    for a, b in zip(native_formats, chat_formats, strict=True):
        assert {k: v for k, v in a.items() if v != b[k] and k not in counts} == {}


@pytest.mark.parametrize("stream", [False, True])
def test_the_token_samples_are_the_chat_exchanges_tokens(
    stub_factory, proxy_factory, tmp_path, stream
):
    """Every token of the sample is one the server reported, at its position: the last
    step's prompt ids then its sampled ids, logprobs and mask on each step's sampled ids."""
    import pyarrow.parquet as pq

    _messages_rollout(stub_factory, proxy_factory, tmp_path, stream)
    records = tmp_path / "records"
    write_result(records, "m1")
    out = tmp_path / "out"
    done = cli("export", str(records), "--out", str(out), "--format", "tokens", "--format",
               "atif", timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    val = cli("validate", str(out / "results.jsonl"), "--json", timeout=120)
    assert json.loads(val.stdout)["violations"] == [], val.stdout
    [sample] = [r for f in sorted((out / "tokens").rglob("*.parquet"))
                for r in pq.read_table(f).to_pylist()]  # fmt: skip
    (_, first), (_, last) = exchanges(records, "m1")
    tokens = [o["tokens"] for o in (first, last)]
    ids = [(t["prompt_token_ids"], t["choices"][0]["token_ids"]) for t in tokens]
    assert sample["token_ids"] == ids[1][0] + ids[1][1]
    assert ids[1][0][: len(ids[0][0]) + len(ids[0][1])] == ids[0][0] + ids[0][1]
    spans = [(len(p), len(p) + len(s)) for p, s in ids]
    trained = [i for i, m in enumerate(sample["mask"]) if m]
    assert trained == [i for a, b in spans for i in range(a, b)]
    want = [lp for t in tokens for lp in t["choices"][0]["logprobs"]]
    assert [sample["logprobs"][i] for i in trained] == pytest.approx(want, abs=1e-6)
    assert len(list((out / "atif").rglob("*.json"))) >= 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_changed_responses_id_is_caught(stub_factory, proxy_factory, tmp_path, stream):
    """A Responses answer rebuilt with the recorded ids: one id changed in the log is found."""
    _responses_rollout(stub_factory, proxy_factory, stream)
    records = tmp_path / "records"
    write_result(records, "c1")

    def change(out: dict) -> None:
        out["drawn"]["response_id"] = ["resp_0000000000000000"]

    rewrite_record(records / "c1" / "exchanges.jsonl", 1, "outcome", change)
    row = export_one_and_validate(records, tmp_path / "out")
    assert row["not_ready_kinds"] == ["translation_mismatch"]
    assert row["training_ready_reason"].startswith("exchange 1: the client's answer is not")


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_the_translation_cannot_read_fails_closed(
    upstream, proxy_factory, tmp_path, stream
):
    """A chat answer the translation cannot read: the client gets no answer made up of it
    (a 502, or a stream that stops), and the outcome is an upstream_error saying why."""
    first = {"id": "c", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant"}}]}  # fmt: skip
    bad = {"id": "c", "object": "chat.completion.chunk", "model": "m",
           "choices": [{"index": 0, "delta": "not a delta"}]}  # fmt: skip

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        if not stream:
            return web.json_response({"id": "c", "object": "chat.completion", "choices": []})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in (first, bad):
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    proxy = proxy_factory(upstream(AiohttpUpstream(handler)).url, messages_route="chat")
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}],
            "stream": stream}  # fmt: skip
    got = httpx.post(proxy.rollout_base_url("r1") + "/messages", json=body, timeout=20)
    if stream:
        assert b"message_start" in got.content and b"message_stop" not in got.content
    else:
        assert got.status_code == 502 and "could not be translated" in got.text
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error"
    assert out["error"].startswith("the upstream answer could not be translated (")
    assert out["client_status"] == (200 if stream else 502)
