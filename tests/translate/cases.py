"""Translation cases that vLLM 0.32's own conversion code answered once
(``tools/translation_goldens.py`` wrote ``goldens.json`` from them), so the fast tier holds
the translation to vLLM without vLLM installed. Plain data: the tool imports this module
under vLLM's venv.
"""

from __future__ import annotations

from typing import Any

BASH = {
    "name": "Bash",
    "description": "run",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}

CLAUDE_CODE: dict[str, Any] = {
    "model": "tiny",
    "max_tokens": 32000,
    "stream": True,
    "metadata": {"user_id": '{"device":"x"}'},
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cch=abc;"},
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
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
                {"type": "tool_use", "id": "call_1", "name": "Bash", "input": {"command": "ls é"}},
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
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": [
                        {"type": "text", "text": "l1"},
                        {"type": "text", "text": "l2"},
                        {"type": "tool_reference", "tool_name": "Read"},
                    ],
                },
                {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}},
            ],
        },
        {"role": "system", "content": "x-anthropic-billing-header: again"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "text", "text": "x"}],
                }
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
        {"role": "user", "content": [{"type": "tool_reference", "tool_name": "X"}]},
    ],
    "tools": [
        BASH,
        {"name": "Read", "input_schema": {"properties": {}}, "defer_loading": True, "strict": True},
    ],
    "thinking": {"type": "adaptive"},
    "context_management": {"edits": []},
    "output_config": {"effort": "high"},
}

SAMPLED: dict[str, Any] = {
    "model": "tiny",
    "max_tokens": 4000,
    "messages": [
        {"role": "user", "content": "q"},
        {
            "role": "system",
            "content": [
                {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Read"}},
                {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Bash"}},
                {"type": "text", "text": "tools changed"},
            ],
        },
    ],
    "stop_sequences": ["END"],
    "temperature": 0,
    "top_p": 0.9,
    "top_k": 5,
    "tool_choice": {"type": "tool", "name": "Read", "disable_parallel_tool_use": True},
    "tools": [BASH, {"name": "Read", "input_schema": {"type": "object"}, "defer_loading": True}],
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
    "chat_template_kwargs": {"enable_thinking": False},
}

#: name -> (request, merge_inline_system, disabled_thinking_effort)
MESSAGES_REQUESTS: dict[str, tuple[dict[str, Any], bool, str]] = {
    "claude_code": (CLAUDE_CODE, False, "none"),
    "claude_code_merged": (CLAUDE_CODE, True, "none"),
    "sampled": (SAMPLED, False, "none"),
    "sampled_merged": (SAMPLED, True, "none"),
    "thinking_off": (
        {**SAMPLED, "thinking": {"type": "disabled"}, "tool_choice": {"type": "any"}},
        False,
        "low",
    ),
    "no_tools": (
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}],
            "tool_choice": {"type": "none"},
        },
        False,
        "none",
    ),
}


def _answer(
    message: dict[str, Any], finish: str, matched: Any = None, **usage: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
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
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": matched,
                "token_ids": [1, 2],
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, **usage},
        "prompt_token_ids": [5, 6],
    }


CALL = {
    "id": "call_9",
    "type": "function",
    "function": {"name": "Bash", "arguments": '{"command": "ls", "t": null}'},
}

#: name -> a chat completion
CHAT_ANSWERS: dict[str, dict[str, Any]] = {
    "everything": _answer(
        {"content": "ok", "reasoning": "hmm", "tool_calls": [CALL]}, "tool_calls"
    ),
    "stop_string": _answer({"content": "x"}, "stop", "END"),
    "stop_token": _answer({"content": "x"}, "stop", 7),
    "length": _answer({"reasoning": "long"}, "length"),
    "empty": _answer({}, "stop"),
    "cached": _answer(
        {"content": "c"},
        "stop",
        prompt_tokens_details={"cached_tokens": 4, "created_cache_tokens": 2},
    ),
}


def _chunk(
    delta: dict[str, Any] | None, finish: Any = None, matched: Any = None, done: int = 0
) -> dict[str, Any]:
    choices = (
        []
        if delta is None
        else [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": matched,
                "token_ids": [3],
            }
        ]
    )
    return {
        "id": "chatcmpl-7",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "tiny",
        "choices": choices,
        "usage": {"prompt_tokens": 10, "completion_tokens": done, "total_tokens": 10 + done},
    }


def _call(index: int, call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        call["id"], call["type"] = call_id, "function"
    if name is not None:
        call["function"]["name"] = name
    return {"tool_calls": [call]}


START = _chunk({"role": "assistant", "content": ""})

#: name -> chat chunks (``"[DONE]"`` for the end marker)
CHAT_STREAMS: dict[str, list[Any]] = {
    "thinking_text": [
        START,
        _chunk({"reasoning": "a"}, done=1),
        _chunk({"reasoning": "b é"}, done=2),
        _chunk({"content": "Hi\n"}, done=3),
        _chunk({"content": ""}, "stop", done=4),
        _chunk(None, done=4),
        "[DONE]",
    ],
    "tools_and_held_text": [
        START,
        _chunk({"content": "first"}, done=1),
        _chunk(_call(0, "c1", "Bash", ""), done=2),
        _chunk(_call(0, None, None, '{"command"'), done=3),
        _chunk({"content": "later"}, done=4),
        _chunk(_call(0, None, None, ': "ls"}'), done=5),
        _chunk(_call(1, "c2", "Bash", '{"command": "pwd"}'), "tool_calls", done=6),
        _chunk(None, done=6),
        "[DONE]",
    ],
    "stop_string_cuts_a_call": [
        START,
        _chunk(_call(0, "c1", "Bash", '{"comm'), "stop", "END", done=1),
        _chunk(None, done=1),
        "[DONE]",
    ],
    "length": [START, _chunk({"reasoning": "x"}, "length", done=1), _chunk(None, done=1), "[DONE]"],
}
