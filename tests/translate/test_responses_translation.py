"""The Responses API to and from chat completions, as vLLM 0.32's Responses server does it."""

from __future__ import annotations

import json
from itertools import count
from typing import Any

import pytest

from contagent.wire.translate import Untranslatable
from contagent.wire.translate.responses_events import ResponsesEvents, custom_payload_prefix
from contagent.wire.translate.responses_reply import ReplyContext, to_responses_response
from contagent.wire.translate.responses_request import custom_tool_parameters, to_chat_request

SHELL = {
    "type": "function",
    "name": "shell",
    "description": "run",
    "strict": False,
    "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
}
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "patch",
    "format": {"type": "text"},
}
NS = {
    "type": "namespace",
    "name": "mcp",
    "description": "d",
    "tools": [
        {"type": "function", "name": "read", "parameters": {"type": "object"}},
        {"type": "custom", "name": "skipped"},
    ],
}


def codex_body(**extra: Any) -> dict[str, Any]:
    """The shape Codex sends: instructions, developer and user messages of input_text
    parts, reasoning items with summaries and content, function and custom tool calls with
    their outputs, built-in tools beside function tools."""
    return {
        "model": "tiny",
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "sandbox: none"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "fix it"}],
            },
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "short"}],
                "content": [{"type": "reasoning_text", "text": "long"}],
                "encrypted_content": None,
            },
            {
                "type": "function_call",
                "name": "shell",
                "arguments": '{"command":["ls"]}',
                "call_id": "call_1",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "a.py"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "patching"}],
            },
            {
                "type": "custom_tool_call",
                "name": "apply_patch",
                "input": "*** Begin Patch é",
                "call_id": "call_2",
            },
            {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done"},
            {
                "type": "function_call",
                "name": "read",
                "namespace": "mcp",
                "arguments": "{}",
                "call_id": "call_3",
            },
        ],
        "tools": [SHELL, PATCH, NS, {"type": "web_search"}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k",
        **extra,
    }


def test_codex_request_becomes_vllms_chat_messages_and_tools() -> None:
    chat = to_chat_request(codex_body())
    assert chat["messages"] == [
        {"role": "system", "content": "You are Codex."},
        {"role": "developer", "content": [{"type": "text", "text": "sandbox: none"}]},
        {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
        {
            "role": "assistant",
            "reasoning": "long",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"command":["ls"]}'},
                }
            ],
        },
        {"role": "tool", "content": "a.py", "tool_call_id": "call_1"},
        {
            "role": "assistant",
            "content": "patching",
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {
                        "name": "apply_patch",
                        "arguments": '{"input": "*** Begin Patch é"}',
                    },
                }
            ],
        },
        {"role": "tool", "content": "Done", "tool_call_id": "call_2"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "mcp__read", "arguments": "{}"},
                }
            ],
        },
    ]
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "run",
                "parameters": SHELL["parameters"],
                "strict": False,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "apply_patch",
                "description": "patch",
                "parameters": custom_tool_parameters(),
            },
        },
        {"type": "function", "function": {"name": "mcp__read", "parameters": {"type": "object"}}},
    ]
    assert {k: v for k, v in chat.items() if k not in ("messages", "tools")} == {
        "model": "tiny",
        "parallel_tool_calls": False,
        "reasoning_effort": "medium",
        "tool_choice": "auto",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_a_reasoning_item_uses_its_summary_when_it_has_no_content_and_string_input_is_a_user_turn() -> (
    None
):
    body = {
        "model": "m",
        "input": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
            {"role": "assistant", "content": "a"},
        ],
    }
    assert to_chat_request(body)["messages"] == [
        {"role": "assistant", "reasoning": "s", "content": "a"}
    ]
    assert to_chat_request({"model": "m", "input": "hi", "max_output_tokens": 9})["messages"] == [
        {"role": "user", "content": "hi"}
    ]
    assert to_chat_request({"model": "m", "input": "hi", "max_output_tokens": 9})["max_tokens"] == 9


def test_a_last_item_in_progress_is_continued() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "q"},
            {
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [{"type": "output_text", "text": "par"}],
            },
        ],
    }
    chat = to_chat_request(body)
    assert chat["add_generation_prompt"] is False and chat["continue_final_message"] is True


def test_named_tool_choice_and_json_schema_text_format() -> None:
    chat = to_chat_request(
        {
            **codex_body(),
            "tool_choice": {"type": "function", "name": "shell"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        }
    )
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "shell"}}
    assert chat["structured_outputs"] == {"json": {"type": "object"}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id: the proxy stores no responses"),
        ({"background": True}, "background"),
        ({"include": ["message.output_text.logprobs"]}, "output logprobs"),
        ({"input": [{"type": "reasoning", "encrypted_content": "gAAA"}]}, "encrypted reasoning"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input_image parts",
        ),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input item type 'item_reference'"),
        ({"tool_choice": {"type": "allowed_tools", "tools": []}}, "tool_choice"),
        ({"input": 3}, "input must be"),
    ],
)
def test_what_cannot_be_carried_is_refused_in_one_line(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(Untranslatable, match=message) as caught:
        to_chat_request({**codex_body(), **change})
    assert "\n" not in str(caught.value)


# --- answers -------------------------------------------------------------------------------


def context(**extra: Any) -> ReplyContext:
    numbers = count()
    return ReplyContext(
        request=codex_body(**extra),
        response_id="resp_0",
        created_at=7,
        max_model_len=2048,
        make_id=lambda p: f"{p}_{next(numbers)}",
    )


def test_a_chat_answer_becomes_vllms_responses_object() -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "mcp__read", "arguments": "{}"}},
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "apply_patch", "arguments": '{"input": "*** Begin"}'},
        },
    ]
    chat = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "message": {"content": "ok", "reasoning": "hm", "tool_calls": calls},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "completion_tokens_details": {"reasoning_tokens": 5},
        },
    }
    out = to_responses_response(chat, context(temperature=0))
    # byte for byte as vLLM 0.32 dumps the openai SDK's items (its answers to the tier's
    # replay): a message's ``phase`` and a call's ``async`` and ``caller`` are null, not absent
    assert json.dumps(out["output"]) == (
        '[{"id": "rs_0", "summary": [], "type": "reasoning", "content": [{"text": "hm", '
        '"type": "reasoning_text"}], "encrypted_content": null, "status": null}, '
        '{"id": "msg_1", "content": [{"annotations": [], "text": "ok", "type": "output_text", '
        '"logprobs": null}], "role": "assistant", "status": "completed", "type": "message", '
        '"phase": null}, '
        '{"arguments": "{}", "call_id": "c1", "name": "read", "type": "function_call", '
        '"id": "fc_2", "async": null, "caller": null, "namespace": "mcp", "status": "completed"}, '
        '{"call_id": "c2", "input": "*** Begin", "name": "apply_patch", '
        '"type": "custom_tool_call", "id": "ctc_3", "async": null, "caller": null, '
        '"namespace": null}]'
    )
    assert (out["id"], out["created_at"], out["status"], out["incomplete_details"]) == (
        "resp_0",
        7,
        "completed",
        None,
    )
    assert (
        out["usage"]["input_tokens"] == 100
        and out["usage"]["output_tokens_details"]["reasoning_tokens"] == 5
    )
    assert out["usage"]["total_tokens"] == 120
    # the client's temperature 0 comes back as vLLM's float, 0.0
    assert json.dumps([out["temperature"], out["top_p"]]) == "[0.0, 1.0]"
    assert (out["max_output_tokens"], out["parallel_tool_calls"]) == (1948, False)
    cut = to_responses_response(
        {**chat, "choices": [{**chat["choices"][0], "finish_reason": "length"}]},
        context(max_output_tokens=50),
    )
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {
        "reason": "max_output_tokens"
    }
    assert cut["max_output_tokens"] == 50


def chunk(delta: dict[str, Any] | None, finish: Any = None, **top: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-2", "object": "chat.completion.chunk", "choices": choices, **top}


def stream(chunks: list[Any], ctx: ReplyContext | None = None) -> list[dict[str, Any]]:
    writer = ResponsesEvents(ctx or context())
    out = []
    for c in chunks:
        for raw in writer.feed(c):
            head, data = raw.decode().split("\n", 1)
            payload = json.loads(data.removeprefix("data: "))
            assert head == f"event: {payload['type']}"
            out.append(payload)
    return out


def test_a_streamed_answer_gives_vllms_event_sequence() -> None:
    events = stream(
        [
            chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1] * 48),
            chunk({"reasoning": "th"}),
            chunk({"reasoning": "ink"}),
            chunk({"content": "Hi"}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "shell", "arguments": '{"comm'},
                        }
                    ]
                }
            ),
            chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": 'and":1}'}}]}, "tool_calls"
            ),
            chunk(None, usage={"prompt_tokens": 48, "completion_tokens": 9}),
            "[DONE]",
        ]
    )
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert (
        events[0]["response"]["status"] == "in_progress"
        and events[0]["response"]["max_output_tokens"] == 2000
    )
    assert json.dumps(events[19]["item"]) == (
        '{"arguments": "{\\"command\\":1}", "call_id": "c1", "name": "shell", '
        '"type": "function_call", "id": "fc_2", "async": null, "caller": null, '
        '"namespace": null, "status": "completed"}'
    )
    assert json.dumps(events[9]["item"]) == (
        '{"id": "msg_1", "content": [], "role": "assistant", "status": "in_progress", '
        '"type": "message", "phase": null}'
    )
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][0]["content"] == [{"text": "think", "type": "reasoning_text"}]
    assert final["usage"]["total_tokens"] == 57 and final["status"] == "completed"


def test_a_custom_tool_call_streams_its_decoded_payload() -> None:
    pieces = ['{"input": "*** Be', "gin\\", "n\\u00e9", '"}']
    chunks: list[Any] = [chunk({"role": "assistant", "content": ""})]
    chunks.append(
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c9",
                        "function": {"name": "apply_patch", "arguments": pieces[0]},
                    }
                ]
            }
        )
    )
    chunks += [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces[1:]
    ]
    events = stream([*chunks, chunk(None, usage={}), "[DONE]"])
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == "*** Begin\né"
    assert deltas == ["*** Be", "gin", "\né"]
    done = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert done[0]["input"] == "*** Begin\né"


def test_custom_payload_prefix_stops_before_an_unfinished_escape() -> None:
    assert custom_payload_prefix('{"input": "ab\\u00') == "ab"
    assert custom_payload_prefix('{"input": "ab"}') == "ab"
    assert custom_payload_prefix('{"inp') == ""
    assert custom_payload_prefix('{"input": "\\ud83d') == ""


def test_an_error_chunk_is_one_error_event() -> None:
    events = stream(
        [chunk({"role": "assistant", "content": ""}), {"error": {"message": "boom"}}, "[DONE]"]
    )
    assert events[-1] == {
        "type": "error",
        "code": None,
        "message": "boom",
        "param": None,
        "sequence_number": 2,
    }
