"""The SSE reader and the stream reassembler, by property: chunking never changes the result."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from contagent.proxy.sse import SSEParser
from contagent.testing.llm_stub import (
    Reply,
    StubRequest,
    ToolCall,
    completion_json,
    stream_payloads,
)
from contagent.wire.stream_fold import StreamAssembler

payload_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=40
)
line_end = st.sampled_from(["\n", "\r\n", "\r"])


def _cuts(data: bytes, points: list[int]) -> list[bytes]:
    cuts = sorted({p % (len(data) + 1) for p in points})
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@st.composite
def event_stream(draw):
    payloads = draw(st.lists(payload_text, min_size=1, max_size=8))
    out = []
    for p in payloads:
        nl = draw(line_end)
        if draw(st.booleans()):
            out.append(f": keep-alive{nl}")
        if draw(st.booleans()):
            out.append(f"event: message{nl}id: 7{nl}")
        for line in p.split("\n"):
            # one space after the colon is stripped, so a value starting with a space needs it
            sep = " " if line.startswith(" ") else draw(st.sampled_from(["", " "]))
            out.append(f"data:{sep}{line}{nl}")
        out.append(nl)
    return payloads, "".join(out).encode()


@settings(max_examples=300, deadline=None)
@given(event_stream(), st.lists(st.integers(min_value=0), max_size=12))
def test_any_chunking_gives_the_same_events(stream, points):
    payloads, data = stream
    parser = SSEParser()
    got: list[str] = []
    for piece in _cuts(data, points):
        got.extend(parser.feed(piece))
    last, tail = parser.close()
    # a bare-CR ending may hold the last blank line back until EOF
    assert got + last == [p.replace("\r", "") for p in payloads]
    assert tail == b""


@st.composite
def replies(draw):
    text = st.text(max_size=60)
    calls = draw(st.lists(
        st.builds(ToolCall, st.sampled_from(["terminal", "file_editor", "finish"]),
                  st.dictionaries(st.text(max_size=8), st.text(max_size=30), max_size=3),
                  st.text("abc_0123456789", min_size=1, max_size=10).map(lambda s: "call_" + s)),
        max_size=3, unique_by=lambda c: c.id,
    ))  # fmt: skip
    return Reply(
        content=draw(st.none() | text),
        reasoning_content=draw(st.none() | text.filter(bool)),
        tool_calls=calls,
        finish_reason=draw(st.sampled_from([None, "stop", "length"])),
        chunks=draw(st.integers(1, 9)),
    )


@settings(max_examples=200, deadline=None)
@given(replies(), st.booleans(), st.lists(st.integers(min_value=0), max_size=20))
def test_reassembled_stream_equals_the_unstreamed_message(reply, usage, points):
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": usage}}
    req = StubRequest(0, "POST", "/v1/chat/completions", {}, orjson.dumps(body), body)
    wire = b"".join(b"data: " + p.encode() + b"\n\n" for p in stream_payloads(req, reply, "c1"))
    parser, asm = SSEParser(), StreamAssembler()
    for piece in _cuts(wire, points):
        for payload in parser.feed(piece):
            asm.feed(payload)
    got = asm.result()
    want = completion_json(req, reply, "c1")
    msg, want_msg = got["choices"][0]["message"], want["choices"][0]["message"]
    # a stream cannot tell "no content" from "" once its first delta carries content ""
    assert (msg["content"] or None) == (want_msg["content"] or None)
    assert msg.get("reasoning_content") == want_msg.get("reasoning")  # vLLM names it reasoning
    assert msg.get("tool_calls") == want_msg.get("tool_calls")
    assert got["choices"][0]["finish_reason"] == want["choices"][0]["finish_reason"]
    assert asm.finish_reasons == [want["choices"][0]["finish_reason"]]
    assert got["usage"] == (want["usage"] if usage else None)
    assert got["object"] == "chat.completion" and got["id"] == "c1" and asm.malformed == 0


def test_tool_fragments_join_by_index_even_interleaved():
    asm = StreamAssembler()
    frags = [
        {
            "index": 1,
            "id": "call_b",
            "type": "function",
            "function": {"name": "think", "arguments": ""},
        },
        {
            "index": 0,
            "id": "call_a",
            "type": "function",
            "function": {"name": "terminal", "arguments": '{"com'},
        },
        {"index": 1, "function": {"arguments": '{"t":1}'}},
        {"index": 0, "function": {"arguments": 'mand":"ls"}'}},
    ]
    for f in frags:
        asm.feed(
            orjson.dumps(
                {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"tool_calls": [f]}}],
                }
            ).decode()
        )
    asm.feed('{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}')
    calls = asm.result()["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("call_a", "terminal", '{"command":"ls"}'),
        ("call_b", "think", '{"t":1}'),
    ]


def test_legacy_text_completion_and_responses_streams():
    asm = StreamAssembler()
    for t in ("Hel", "lo"):
        asm.feed(
            orjson.dumps(
                {
                    "id": "t",
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": t, "finish_reason": None}],
                }
            ).decode()
        )
    asm.feed(
        '{"id":"t","object":"text_completion","choices":[{"index":0,"text":"","finish_reason":"stop"}],"usage":{"total_tokens":3}}'
    )
    assert asm.result()["choices"] == [{"index": 0, "text": "Hello", "finish_reason": "stop"}]
    assert asm.usage == {"total_tokens": 3}

    resp = StreamAssembler()
    resp.feed('{"type":"response.created","response":{"status":"in_progress"}}')
    assert resp.result() is None
    resp.feed(
        '{"type":"response.incomplete","response":{"status":"incomplete","usage":{"total_tokens":9}}}'
    )
    assert (
        resp.result() == {"status": "incomplete", "usage": {"total_tokens": 9}}
        and resp.usage["total_tokens"] == 9
    )


def test_unterminated_tail_and_bad_payloads_are_reported():
    parser = SSEParser()
    assert parser.feed(b"data: {}\n\ndata: [DO") == ["{}"]
    assert not parser.at_boundary
    assert parser.close() == ([], b"data: [DO")
    p2 = SSEParser()
    assert p2.feed(b"data: a\ndata: b\n") == []
    assert p2.close() == (["a\nb"], b"")
    asm = StreamAssembler()
    asm.feed("{not json")
    asm.feed("[1, 2]")
    asm.feed("[DONE]")
    assert asm.malformed == 2 and asm.result() is None


def _reference(payloads: list[str]) -> StreamAssembler:
    """The assembler without its token-template shortcut: every payload fully parsed."""
    asm = StreamAssembler()
    for p in payloads:
        if p == "[DONE]":
            continue
        try:
            event = orjson.loads(p)
        except orjson.JSONDecodeError:
            asm.malformed += 1
            continue
        asm.feed_event(event)
    return asm


_token = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)


@st.composite
def token_streams(draw):
    """Chat streams whose events mostly differ in one content token, with every twist
    that must defeat the shortcut: other ids/fingerprints, usage, finish reasons,
    escaped encodings, a second key, and middles that are not one JSON string."""
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=25))):
        cid = draw(st.sampled_from(["a", "a", "a", "b"]))
        fp = draw(st.sampled_from([None, None, "fp1", "fp2"]))
        tok = draw(_token)
        enc = draw(st.sampled_from(["orjson", "ascii", "spaced"]))
        delta: dict[str, object] = {"content": tok}
        kind = draw(
            st.sampled_from(["token"] * 6 + ["role", "finish", "usage", "two", "index", "bad"])
        )
        if kind == "role":
            delta = {"role": "assistant", "content": tok}
        event: dict[str, object] = {"id": cid, "object": "chat.completion.chunk", "model": "m"}
        if fp is not None:
            event["system_fingerprint"] = fp
        choice: dict[str, object] = {"index": 1 if kind == "index" else 0, "delta": delta,
                                     "finish_reason": "stop" if kind == "finish" else None}  # fmt: skip
        event["choices"] = [choice]
        if kind == "usage":
            event["usage"] = {"total_tokens": 3}
        if kind == "two":
            event["choices"] = [choice, {**choice, "index": 2}]
        if enc == "ascii":
            import json

            text = json.dumps(event, ensure_ascii=True, separators=(",", ":"))
        elif enc == "spaced":
            import json

            text = json.dumps(event)
        else:
            text = orjson.dumps(event).decode()
        if kind == "bad":  # same frame, but the middle is no single JSON string
            mid = orjson.dumps(tok).decode()
            text = text.replace(
                mid, draw(st.sampled_from([mid + ',"x":1', "1", mid[:-1], "[" + mid + "]"])), 1
            )
        out.append(text)
    if draw(st.booleans()):
        out.append("[DONE]")
    return out


@settings(max_examples=400, deadline=None)
@given(token_streams())
def test_token_template_shortcut_changes_nothing(payloads):
    fast = StreamAssembler()
    fast.feed_many(payloads)
    ref = _reference(payloads)
    assert fast.result() == ref.result()
    assert fast.usage == ref.usage
    assert fast.finish_reasons == ref.finish_reasons
    assert fast.malformed == ref.malformed


def test_token_template_shortcut_is_taken_and_exact():
    head = '{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":'
    tail = ',"logprobs":null,"finish_reason":null}]}'
    payloads = [head + '{"role":"assistant","content":""}' + tail]
    payloads += [
        head + '{"content":' + t + "}" + tail for t in ['"a"', '"\\u00e9"', '"\\n"', '"b"']
    ]
    payloads.append(head + '{"content":"c","x":1}' + tail)  # a second key: full parse
    parsed: list[object] = []

    class Counting(StreamAssembler):
        __slots__ = ()

        def feed_event(self, event: object) -> None:
            parsed.append(event)
            super().feed_event(event)

    asm = Counting()
    asm.feed_many(payloads)
    # role event, first token (learns the frame), the two-key event; "\u00e9", "\n", "b" skip parsing
    assert len(parsed) == 3
    assert asm.result()["choices"][0]["message"]["content"] == "a\u00e9\nbc"
    assert asm.result() == _reference(payloads).result()


def test_token_template_is_only_learned_at_the_delta_content():
    # the delta's token is escaped differently from orjson, and another field holds the
    # orjson spelling of the same text: a naive search would take the wrong spot
    payloads = [
        '{"id":"x","choices":[{"index":0,"delta":{"content":"\\u0074ok"},"finish_reason":null}],'
        '"x":{"content":"tok"}}',
        '{"id":"x","choices":[{"index":0,"delta":{"content":"\\u0074ok"},"finish_reason":null}],'
        '"x":{"content":"OTHER"}}',
    ]
    asm = StreamAssembler()
    asm.feed_many(payloads)
    assert asm.result()["choices"][0]["message"]["content"] == "toktok"
    assert asm.result() == _reference(payloads).result()
