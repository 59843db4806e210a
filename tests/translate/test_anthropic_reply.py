"""A chat answer (JSON or chunks) as the Messages answer vLLM 0.32's Messages server gives."""

from __future__ import annotations

import json
from itertools import count, pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contagent.wire.translate.anthropic_events import MessagesEvents
from contagent.wire.translate.anthropic_reply import to_messages_response, usage


def signer() -> Any:
    numbers = count()
    return lambda: f"sig{next(numbers)}"


def chat_json(
    message: dict[str, Any], finish: str = "stop", matched: Any = None, **top: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning": None,
                    "tool_calls": [],
                    **message,
                },
                "finish_reason": finish,
                "stop_reason": matched,
                "token_ids": [1],
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "total_tokens": 13,
            "prompt_tokens_details": None,
        },
        "prompt_token_ids": [1, 2],
        "kv_transfer_params": None,
        **top,
    }


def test_reasoning_text_and_tool_calls_become_blocks_in_vllms_order() -> None:
    call = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "Bash", "arguments": '{"command": "ls", "timeout": null}'},
    }
    out = to_messages_response(
        chat_json({"content": "ok", "reasoning": "hmm", "tool_calls": [call]}, "tool_calls"),
        signer(),
    )
    assert out == {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig0"},
            {"type": "text", "text": "ok"},
            {
                "type": "tool_use",
                "id": "call_9",
                "name": "Bash",
                "input": {"command": "ls", "timeout": None},
            },
        ],
        "model": "tiny",
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }
    assert list(out) == ["id", "type", "role", "content", "model", "stop_reason", "usage"]


def test_stop_reasons() -> None:
    assert to_messages_response(chat_json({"content": "x"}))["stop_reason"] == "end_turn"
    assert (
        to_messages_response(chat_json({"content": "x"}, "length"))["stop_reason"] == "max_tokens"
    )
    cut = to_messages_response(chat_json({"content": "x"}, "stop", "END"))
    assert (cut["stop_reason"], cut["stop_sequence"]) == ("stop_sequence", "END")
    assert (
        to_messages_response(chat_json({"content": "x"}, "stop", 151645))["stop_reason"]
        == "end_turn"
    )
    assert "stop_reason" not in to_messages_response(chat_json({"content": "x"}, "abort"))


def test_an_empty_answer_is_one_empty_text_block() -> None:
    assert to_messages_response(chat_json({}))["content"] == [{"type": "text", "text": ""}]


def test_cached_prompt_tokens_leave_input_tokens() -> None:
    details = {
        "prompt_tokens": 100,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 64, "created_cache_tokens": 6},
    }
    assert usage(details) == {
        "input_tokens": 30,
        "output_tokens": 4,
        "cache_creation_input_tokens": 6,
        "cache_read_input_tokens": 64,
    }
    assert usage(None) == {"input_tokens": 0, "output_tokens": 0}
    assert usage({"prompt_tokens": 7, "completion_tokens": None}) == {
        "input_tokens": 7,
        "output_tokens": 0,
    }


# --- streams -------------------------------------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    finish: Any = None,
    matched: Any = None,
    prompt: int = 10,
    done: int = 0,
) -> dict[str, Any]:
    choices = (
        []
        if delta is None
        else [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": finish,
                "stop_reason": matched,
                "token_ids": [5],
            }
        ]
    )
    return {
        "id": "chatcmpl-7",
        "object": "chat.completion.chunk",
        "model": "tiny",
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": done,
            "total_tokens": prompt + done,
        },
    }


def events(chunks: list[Any], sign: Any = None) -> list[tuple[str, dict[str, Any]]]:
    writer = MessagesEvents(sign or signer())
    out: list[tuple[str, dict[str, Any]]] = []
    for c in chunks:
        for raw in writer.feed(c):
            head, data = raw.decode().split("\n", 1)
            assert raw.endswith(b"\n\n") and data.startswith("data: ")
            out.append((head.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def test_a_thinking_text_stream_gives_vllms_event_sequence() -> None:
    got = events(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning": "a"}, done=1),
            chunk({"reasoning": "b"}, done=2),
            chunk({"content": "Hi"}, done=3),
            chunk({"content": ""}, "stop", done=4),
            chunk(None, done=4),
            "[DONE]",
        ]
    )
    assert [name for name, _ in got] == [
        "message_start",
        "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert got[0][1] == {
        "type": "message_start",
        "message": {
            "id": "chatcmpl-7",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "tiny",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 0},
        },
    }
    assert got[1][1] == {
        "type": "content_block_start",
        "content_block": {"type": "thinking", "thinking": ""},
        "index": 0,
    }
    assert got[4][1] == {
        "type": "content_block_delta",
        "delta": {"type": "signature_delta", "signature": "sig0"},
        "index": 0,
    }
    assert got[6][1]["index"] == 1 and got[7][1]["delta"] == {"type": "text_delta", "text": "Hi"}
    assert got[9][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"input_tokens": 10, "output_tokens": 4},
    }
    assert got[10][1] == {"type": "message_stop"}


def test_text_during_a_tool_call_is_held_until_the_call_ends() -> None:
    got = events(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "Bash", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"command"'}}]}),
            chunk({"content": "later"}),
            chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": ': "ls"}'}}]}, "tool_calls"
            ),
            chunk(None, done=5),
            "[DONE]",
        ]
    )
    payloads = [p for _, p in got]
    assert payloads[1]["content_block"] == {
        "type": "tool_use",
        "id": "c1",
        "name": "Bash",
        "input": {},
    }
    assert [
        p["delta"]["partial_json"]
        for p in payloads
        if p.get("delta", {}).get("type") == "input_json_delta"
    ] == ['{"command"', ': "ls"}']
    tail = payloads[4:]
    assert tail[0] == {"type": "content_block_stop", "index": 0}
    assert tail[1]["content_block"] == {"type": "text", "text": ""} and tail[1]["index"] == 1
    assert tail[2]["delta"] == {"type": "text_delta", "text": "later"}
    assert tail[4]["delta"]["stop_reason"] == "tool_use"


def test_a_stop_string_cutting_a_tool_call_short_is_a_stop_sequence() -> None:
    got = events(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "function": {"name": "Bash", "arguments": '{"comm'},
                        }
                    ]
                },
                "stop",
                "END",
            ),
            chunk(None),
        ]
    )
    assert got[-1][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_an_error_chunk_ends_the_events() -> None:
    writer = MessagesEvents(signer())
    writer.feed(chunk({"role": "assistant", "content": ""}))
    (raw,) = writer.feed({"error": {"message": "engine died", "type": "InternalServerError"}})
    assert (
        raw
        == b'event: error\ndata: {"type":"error","error":{"type":"internal_error","message":"engine died"}}\n\n'
    )
    assert writer.feed("[DONE]") == []


def test_events_are_serialised_compactly_with_non_ascii_as_it_is() -> None:
    writer = MessagesEvents(signer())
    writer.feed(chunk({"role": "assistant", "content": ""}))
    raw = writer.feed(chunk({"content": "é\n"}))
    assert (
        raw[1]
        == 'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"é\\n"},"index":0}\n\n'.encode()
    )


def _pieces(text: str, cuts: list[int]) -> list[str]:
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return [text[a:b] for a, b in pairwise(bounds) if text[a:b]]


@settings(max_examples=60, deadline=None)
@given(
    reasoning=st.text(max_size=12),
    content=st.text(max_size=12),
    calls=st.lists(st.dictionaries(st.sampled_from("abc"), st.integers(), max_size=2), max_size=2),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=4),
)
def test_the_stream_carries_what_the_json_answer_carries(
    reasoning: str, content: str, calls: list[dict[str, int]], cuts: list[int]
) -> None:
    """Reassembled, the events give the blocks, stop reason and usage of the JSON answer."""
    chunks: list[Any] = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning": p}) for p in _pieces(reasoning, cuts)]
    chunks += [chunk({"content": p}) for p in _pieces(content, cuts)]
    tool_calls = []
    for i, arguments in enumerate(calls):
        text = json.dumps(arguments)
        tool_calls.append(
            {"id": f"c{i}", "type": "function", "function": {"name": "T", "arguments": text}}
        )
        first, *rest = _pieces(text, cuts)
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": i, "id": f"c{i}", "function": {"name": "T", "arguments": first}}
                    ]
                }
            )
        )
        chunks += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in rest
        ]
    finish = "tool_calls" if calls else "stop"
    chunks += [chunk({}, finish, done=3), chunk(None, done=3), "[DONE]"]
    blocks: list[dict[str, Any]] = []
    stop: Any = None
    for name, payload in events(chunks):
        if name == "content_block_start":
            blocks.append(dict(payload["content_block"]))
        elif name == "content_block_delta":
            delta, block = payload["delta"], blocks[payload["index"]]
            key = {
                "text_delta": "text",
                "thinking_delta": "thinking",
                "signature_delta": "signature",
                "input_json_delta": "args",
            }[delta["type"]]
            block[key] = block.get(key, "") + delta[{"args": "partial_json"}.get(key, key)]
        elif name == "message_delta":
            stop = payload
    for block in blocks:
        if block["type"] == "tool_use":
            block["input"] = json.loads(block.pop("args"))
    message = {"content": content or None, "reasoning": reasoning or None, "tool_calls": tool_calls}
    answer = to_messages_response(
        chat_json(message, finish, usage={"prompt_tokens": 10, "completion_tokens": 3}), signer()
    )
    assert blocks == (answer["content"] if (reasoning or content or calls) else [])
    assert stop["delta"]["stop_reason"] == answer["stop_reason"]
    assert stop["usage"] == answer["usage"]
