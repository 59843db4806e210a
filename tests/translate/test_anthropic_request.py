"""A Messages request as the chat request vLLM 0.32's Messages server builds from it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contagent.wire.translate import Untranslatable
from contagent.wire.translate.anthropic_request import to_chat_request
from tests.translate.cases import BASH


def claude_code_body(**extra: Any) -> dict[str, Any]:
    """The shape Claude Code 2.1.332 sends (docs/messages.md): system blocks with a billing
    header and cache markers, a system message inside ``messages``, echoed thinking and
    tool calls, tool results, the last block marked for caching."""
    return {
        "model": "tiny",
        "max_tokens": 32000,
        "stream": True,
        "metadata": {"user_id": '{"device":"x"}'},
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cch=abc;"},
            {
                "type": "text",
                "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "text", "text": " Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix the bug"}]},
            {"role": "system", "content": [{"type": "text", "text": "env: linux"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "look first", "signature": "s1"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "Bash",
                        "input": {"command": "ls é"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_1",
                        "content": "a.py",
                        "is_error": False,
                    },
                    {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}},
                ],
            },
        ],
        "tools": [BASH],
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": []},
        "output_config": {"effort": "high"},
        **extra,
    }


def test_claude_code_request_keeps_the_inline_system_message_in_place() -> None:
    chat = to_chat_request(claude_code_body())
    assert chat["messages"] == [
        {"role": "system", "content": "You are Claude Code. Be brief."},
        {"role": "user", "content": "fix the bug"},
        {"role": "system", "content": "env: linux"},
        {
            "role": "assistant",
            "reasoning": "look first",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": json.dumps({"command": "ls é"})},
                }
            ],
            "content": "Looking.",
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "user", "content": "go on"},
    ]
    # vLLM's own json.dumps: spaces after separators, non-ASCII escaped
    assert (
        chat["messages"][3]["tool_calls"][0]["function"]["arguments"] == '{"command": "ls \\u00e9"}'
    )
    assert {k: v for k, v in chat.items() if k != "messages"} == {
        "model": "tiny",
        "max_tokens": 32000,
        "max_completion_tokens": 32000,
        "stop": None,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "reasoning_effort": "high",
        "tool_choice": "auto",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "Bash",
                    "description": "run",
                    "parameters": BASH["input_schema"],
                },
            }
        ],
    }


def test_a_template_that_refuses_inline_system_gets_it_merged_into_the_leading_one() -> None:
    chat = to_chat_request(claude_code_body(), merge_inline_system=True)
    assert chat["messages"][0] == {
        "role": "system",
        "content": "You are Claude Code. Be brief.env: linux",
    }
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "user"]


def test_inline_system_alone_makes_the_leading_system_message_when_merged() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "q"}, {"role": "system", "content": "later"}],
    }
    assert to_chat_request(body, merge_inline_system=True)["messages"] == [
        {"role": "system", "content": "later"},
        {"role": "user", "content": "q"},
    ]
    assert to_chat_request(body)["messages"][1] == {"role": "system", "content": "later"}


def test_several_text_blocks_stay_parts_and_empty_user_messages_drop() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": ""},
                    {"type": "tool_reference", "tool_name": "X"},
                ],
            },
        ],
    }
    assert to_chat_request(body)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant"},
    ]


def test_tool_results_with_references_and_assistant_side_results() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [
                            {"type": "text", "text": "l1"},
                            {"type": "text", "text": "l2"},
                            {"type": "tool_reference", "tool_name": "Read"},
                        ],
                    }
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "x"}],
                    }
                ],
            },
        ],
    }
    assert to_chat_request(body)["messages"] == [
        {"role": "tool", "tool_call_id": "t1", "content": "l1\nl2"},
        {
            "role": "tool",
            "tool_call_id": "t1",
            "content": [{"type": "tool_reference", "name": "Read"}],
        },
        {"role": "assistant", "content": "Tool result: [{'type': 'text', 'text': 'x'}]"},
    ]


def test_sampling_tool_choice_and_thinking_fields() -> None:
    body = {
        "model": "m",
        "max_tokens": 4000,
        "messages": [{"role": "user", "content": "q"}],
        "stop_sequences": ["END"],
        "temperature": 0,
        "top_p": 0.9,
        "top_k": 5,
        "tool_choice": {"type": "tool", "name": "Bash", "disable_parallel_tool_use": True},
        "tools": [{"name": "Bash", "input_schema": {"properties": {}}}],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        "chat_template_kwargs": {"enable_thinking": False},
    }
    chat = to_chat_request(body)
    assert (
        chat["stop"] == ["END"]
        and chat["temperature"] == 0
        and chat["top_p"] == 0.9
        and chat["top_k"] == 5
    )
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "Bash"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["tools"][0]["function"]["parameters"] == {"properties": {}, "type": "object"}
    assert chat["thinking_token_budget"] == 2048
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "json_schema", "schema": {"type": "object"}},
    }
    assert chat["chat_template_kwargs"] == {"enable_thinking": False}
    assert "stream" not in chat
    for kind, expected in (("any", "required"), ("auto", "auto"), ("none", "none")):
        assert to_chat_request({**body, "tool_choice": {"type": kind}})["tool_choice"] == expected
    disabled = {**body, "thinking": {"type": "disabled"}}
    assert to_chat_request(disabled)["reasoning_effort"] == "none"
    assert to_chat_request(disabled, disabled_thinking_effort="low")["reasoning_effort"] == "low"


def test_tool_additions_and_removals_in_system_messages_change_the_tools() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "tools": [
            BASH,
            {"name": "Read", "input_schema": {"type": "object"}, "defer_loading": True},
        ],
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "system",
                "content": [
                    {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Read"}},
                    {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Bash"}},
                    {
                        "type": "tool_addition",
                        "tool": {
                            "type": "tool_definition",
                            "definition": {"name": "W", "input_schema": {"type": "object"}},
                        },
                    },
                ],
            },
        ],
    }
    chat = to_chat_request(body)
    assert [t["function"]["name"] for t in chat["tools"]] == ["Read", "W"]
    assert "defer_loading" not in chat["tools"][0]["function"]
    assert [m["role"] for m in chat["messages"]] == ["user"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "url", "url": "u"}}],
                    }
                ]
            },
            "images are not translated",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "block type 'document' is not translated",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    }
                ]
            },
            "images in a tool result",
        ),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "role must be user, assistant or system",
        ),
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"model": ""}, "model is required"),
        ({"tools": []}, "an empty tools list"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name is required"),
        ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "budget_tokens"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_addition",
                                "tool": {"type": "tool_reference", "name": "x"},
                            }
                        ],
                    }
                ]
            },
            "only allowed in system",
        ),
    ],
)
def test_what_cannot_be_carried_is_refused_in_one_line(
    change: dict[str, Any], message: str
) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}], **change}
    with pytest.raises(Untranslatable, match=message) as caught:
        to_chat_request(body)
    assert "\n" not in str(caught.value)


def test_a_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(Untranslatable, match="not a JSON object"):
        to_chat_request([1])
