"""The Messages-API mapping: content blocks to chat shape, so that every chat rule applies."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contagent import rules
from contagent.proxy.sse import SSEParser
from contagent.testing.llm_stub import Reply, StubRequest, ToolCall
from contagent.testing.messages_moves import message_events, message_json
from contagent.wire.chat import usage_counts
from contagent.wire.messages_api import chat_body, chat_response, normalise_exchanges
from contagent.wire.stream_fold import StreamAssembler

CACHE = {"type": "ephemeral"}


def _req(body: dict[str, Any]) -> StubRequest:
    return StubRequest(0, "POST", "/v1/messages", {}, orjson.dumps(body), body)


def test_request_blocks_become_chat_messages() -> None:
    body = {
        "model": "m",
        "system": [
            {"type": "text", "text": "be"},
            {"type": "text", "text": "brief", **{"cache_control": CACHE}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "do it"}]},
            {"role": "system", "content": [{"type": "text", "text": "env"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"z": 1, "a": "ls"}},
                    {"type": "tool_use", "id": "t2", "name": "Bash", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "a.txt",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [{"type": "text", "text": "boom"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "go on", "cache_control": CACHE},
                ],
            },
        ],
        "tools": [
            {
                "name": "Bash",
                "description": "sh",
                "input_schema": {"type": "object"},
                "cache_control": CACHE,
            }
        ],
    }
    chat, unknown = chat_body(body)
    assert unknown == []
    assert chat["messages"] == [
        {"role": "system", "content": "be\nbrief"},
        {"role": "user", "content": "do it"},
        {"role": "system", "content": "env"},
        {
            "role": "assistant",
            "content": "ok",
            "reasoning_content": "hm",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": '{"a":"ls","z":1}'},
                },
                {"id": "t2", "type": "function", "function": {"name": "Bash", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "a.txt", "is_error": False},
        {"role": "tool", "tool_call_id": "t2", "content": "boom", "is_error": True},
        {"role": "user", "content": "go on"},
    ]
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "Bash", "description": "sh", "parameters": {"type": "object"}},
        }
    ]
    assert "system" not in chat


def test_cache_control_and_block_lists_do_not_change_the_canonical_form() -> None:
    """Claude Code moves the cache marker every turn and sends its in-`messages` system
    message as blocks first and as a string later: the same conversation either way."""
    blocks = [
        {"type": "text", "text": "env"},
        {"type": "text", "text": "skills", "cache_control": CACHE},
    ]
    early = chat_body(
        {"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": blocks}]}
    )
    later = chat_body(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "env\nskills"},
            ]
        }
    )
    assert early == later


def test_media_and_redacted_thinking_fail_closed() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
    }
    chat, unknown = chat_body(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, image]}]}
    )
    assert unknown == []
    assert rules.tool_protocol_problems(chat["messages"])[0][0] == "non_text_content"
    redacted = {"type": "redacted_thinking", "data": "xx"}
    _, unknown = chat_body({"messages": [{"role": "assistant", "content": [redacted]}]})
    assert unknown == ["redacted_thinking"]


@pytest.mark.parametrize(
    ("stop", "finish", "complete"),
    [
        ("end_turn", "stop", True),
        ("stop_sequence", "stop", True),
        ("tool_use", "tool_calls", True),
        ("max_tokens", "length", False),
        ("refusal", "refusal", False),
        ("pause_turn", "pause_turn", False),
        (None, None, False),
    ],
)
def test_stop_reasons(stop: str | None, finish: str | None, complete: bool) -> None:
    response = {"type": "message", "content": [{"type": "text", "text": "x"}], "stop_reason": stop}
    chat, _ = chat_response(response)
    assert chat["choices"][0]["finish_reason"] == finish
    assert rules.completeness(200, chat)[0] is complete
    assert rules.completeness(200, response)[0] is complete  # the proxy's view, before mapping


def test_prompt_tokens_count_both_caches() -> None:
    usage = {
        "input_tokens": 3,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": 100,
        "output_tokens": 7,
    }
    assert usage_counts(usage) == {
        "prompt_tokens": 113,
        "completion_tokens": 7,
        "total_tokens": 120,
    }
    assert usage_counts({**usage, "cache_read_input_tokens": -1}) is None
    assert usage_counts({**usage, "output_tokens": None}) is None


def _assembled(events: list[tuple[str, str]], chunk: int = 7) -> dict[str, Any] | None:
    """Reassemble the events as the proxy does: the wire bytes, cut into ``chunk``-byte reads."""
    wire = b"".join(f"event: {name}\ndata: {data}\n\n".encode() for name, data in events)
    parser, asm = SSEParser(), StreamAssembler()
    for i in range(0, len(wire), chunk):
        asm.feed_many(parser.feed(wire[i : i + chunk]))
    return asm.result()


def test_stream_reassembles_the_whole_message() -> None:
    req = _req({"model": "m", "stream": True})
    reply = Reply(
        content="done",
        reasoning_content="think first",
        tool_calls=[
            ToolCall("Bash", {"command": "ls -la"}, id="toolu_1"),
            ToolCall("Read", {"p": "x"}, id="toolu_2"),
        ],
        usage={"input_tokens": 5, "cache_read_input_tokens": 50, "output_tokens": 9},
        chunks=4,
    )
    events = message_events(req, reply, "msg_1")
    assert [n for n, _ in events][:2] == ["message_start", "ping"]
    assert {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} <= {
        orjson.loads(d).get("delta", {}).get("type") for _, d in events
    }
    assert _assembled(events) == message_json(req, reply, "msg_1")


def test_stream_cut_before_message_stop_is_incomplete() -> None:
    req = _req({"model": "m", "stream": True})
    events = message_events(req, Reply(content="ok"), "msg_1")
    whole = _assembled(events)
    assert whole is not None and rules.completeness(200, whole)[0] is True
    cut = _assembled(events[:-1])  # message_delta said end_turn, message_stop never came
    assert cut is not None and cut["stop_reason"] is None
    assert rules.completeness(200, cut)[0] is False
    error = (
        "error",
        orjson.dumps({"type": "error", "error": {"type": "overloaded_error"}}).decode(),
    )
    broken = _assembled([*events[:3], error])
    assert broken == {"type": "error", "error": {"type": "overloaded_error"}}
    assert rules.completeness(200, broken)[0] is False


def test_count_tokens_is_not_a_generation() -> None:
    assert rules.is_chat_route("/v1/messages?beta=true")
    assert not rules.is_chat_route("/v1/messages/count_tokens?beta=true")
    req = {
        "type": "request",
        "index": 0,
        "method": "POST",
        "path": "/v1/messages/count_tokens",
        "body": {"messages": []},
    }
    out = {
        "type": "outcome",
        "index": 0,
        "outcome": "completed",
        "status": 200,
        "response": {"input_tokens": 4},
    }
    assert normalise_exchanges({0: req}, {0: out}) == []
    assert "api" not in req and out["response"] == {"input_tokens": 4}


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    content=st.none() | _TEXT,
    reasoning=st.none() | _TEXT,
    arguments=st.lists(
        st.dictionaries(_TEXT, _TEXT | st.integers(-(2**53), 2**53), max_size=3), max_size=3
    ),
    pieces=st.integers(1, 6),
    chunk=st.integers(1, 64),
)
def test_any_stream_reassembles_to_the_json_answer(
    content: str | None,
    reasoning: str | None,
    arguments: list[dict[str, Any]],
    pieces: int,
    chunk: int,
) -> None:
    """The reader of the Messages event stream: however the deltas are split and the bytes
    cut into reads, the proxy's reassembly is the message the JSON endpoint returns, and
    its chat mapping is the same too."""
    calls = [ToolCall("Bash", a, id=f"toolu_{n}") for n, a in enumerate(arguments)]
    reply = Reply(content=content, reasoning_content=reasoning, tool_calls=calls, chunks=pieces)
    req = _req({"model": "m", "stream": True})
    whole = message_json(req, reply, "msg_p")
    assembled = _assembled(message_events(req, reply, "msg_p"), chunk)
    assert assembled == whole
    assert chat_response(assembled) == chat_response(whole)


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=1, max_size=4),
    marked=st.sets(st.integers(0, 3)),
    role=st.sampled_from(["user", "system"]),
)
def test_cache_markers_never_change_the_conversation(
    texts: list[str], marked: set[int], role: str
) -> None:
    """The reader of request blocks: `cache_control` on any block, and a block list sent
    later as its joined string, give the same chat messages."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
    for n in marked & set(range(len(blocks))):
        blocks[n]["cache_control"] = CACHE
    as_blocks = chat_body({"system": blocks, "messages": [{"role": role, "content": blocks}]})
    joined = "\n".join(texts)
    as_string = chat_body({"system": joined, "messages": [{"role": role, "content": joined}]})
    assert as_blocks == as_string


def test_a_delta_for_no_open_block_is_a_fault_not_a_message() -> None:
    """Text that fits no block would be silently lost from the message: the stream is counted
    as faulty instead (the proxy then records an upstream error)."""
    req = _req({"model": "m", "stream": True})
    events = message_events(req, Reply(content="ok"), "msg_1")
    stray = {
        "type": "content_block_delta",
        "index": 7,
        "delta": {"type": "text_delta", "text": "lost"},
    }
    asm = StreamAssembler()
    asm.feed_many(
        [d for _, d in events[:4]] + [orjson.dumps(stray).decode()] + [d for _, d in events[4:]]
    )
    assert asm.misplaced == 1 and asm.malformed == 0
    whole = StreamAssembler()
    whole.feed_many([d for _, d in events])
    assert whole.misplaced == 0


def test_the_stub_counts_tokens_without_spending_a_move() -> None:
    """The real client's count_tokens and create against the scripted model: the count is
    not a move, so the script's one reply still answers the generation."""
    import anthropic

    from contagent.testing.llm_stub import start_stub_in_thread

    stub = start_stub_in_thread([Reply(content="hi")])
    try:
        c = anthropic.Anthropic(base_url=stub.url, api_key="x", max_retries=0, timeout=10)
        messages: Any = [{"role": "user", "content": "hello"}]
        assert c.messages.count_tokens(model="m", messages=messages).input_tokens > 0
        reply = c.messages.create(model="m", max_tokens=5, messages=messages)
        assert reply.stop_reason == "end_turn" and getattr(reply.content[0], "text", None) == "hi"
    finally:
        stub.stop()
