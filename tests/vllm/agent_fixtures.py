"""Multi-turn Claude Code and Codex conversations, request by request, in the shapes those
agents send.

These were not recorded from the real agents (neither could be run here); they are built
to the wire facts observed from Claude Code 2.1.332 (docs/messages.md and the notes it
cites: system blocks with a billing header and cache markers, a system message inside
``messages``, adaptive thinking, echoed thinking with signatures, ``tool_use`` /
``tool_result``, an error result, ``stream: true``) and to Codex's Responses requests
(instructions, developer and user messages of ``input_text`` parts, reasoning items with
summaries, ``function_call`` / ``function_call_output``, the ``apply_patch`` custom tool
and its ``custom_tool_call``, a built-in tool beside function tools, ``store: false``).
``apply_patch`` is the free-form (text) custom tool: vLLM refuses one with a grammar format.
Each list holds the requests of one conversation in order; every request carries the whole
history, as both agents send it. ``max_tokens`` is small so the tiny model answers fast.
"""

from __future__ import annotations

from typing import Any

SCHEMA = "https://json-schema.org/draft/2020-12/schema"

CC_TOOLS = [
    {
        "name": "Bash",
        "description": "Executes a bash command.",
        "input_schema": {
            "$schema": SCHEMA,
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    {
        "name": "Read",
        "description": "Reads a file.",
        "input_schema": {
            "$schema": SCHEMA,
            "type": "object",
            "properties": {"file_path": {"type": "string"}},
            "required": ["file_path"],
        },
    },
    {
        "name": "DeferredToolPlaceholder",
        "description": "never call",
        "input_schema": {"type": "object"},
        "defer_loading": True,
    },
]

CC_SYSTEM = [
    {
        "type": "text",
        "text": "x-anthropic-billing-header: cc_version=2.1.332.abc; cc_entrypoint=sdk-cli; cch=00000;",
    },
    {
        "type": "text",
        "text": "You are Claude Code, Anthropic's official CLI for Claude.",
        "cache_control": {"type": "ephemeral"},
    },
    {
        "type": "text",
        "text": "\nYou are an interactive agent that helps users with software engineering tasks.",
        "cache_control": {"type": "ephemeral"},
    },
]

CC_ENV = (
    "<system-reminder>\nWorking directory: /root/workspace\nPlatform: linux\n</system-reminder>"
)

_CC_TURN_1 = [
    {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": "Create hello.txt containing hi.",
                "cache_control": {"type": "ephemeral"},
            }
        ],
    },
    {"role": "system", "content": [{"type": "text", "text": CC_ENV}]},
]
_CC_TURN_2 = [
    {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "I should write the file with bash.",
                "signature": "b8d1e2f4a0c94c6e9d0f1a2b3c4d5e6f",
            },
            {"type": "text", "text": "I'll create it."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "Bash",
                "input": {"command": "echo hi > hello.txt"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": "(Bash completed with no output)",
                "is_error": False,
                "cache_control": {"type": "ephemeral"},
            }
        ],
    },
]
_CC_TURN_3 = [
    {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_02",
                "name": "Read",
                "input": {"file_path": "/root/workspace/hello.txt"},
            }
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_02",
                "content": "File does not exist.",
                "is_error": True,
            },
            {"type": "text", "text": "Check again.", "cache_control": {"type": "ephemeral"}},
        ],
    },
]


def _claude_code(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "tiny",
        "max_tokens": 48,
        "stream": True,
        "metadata": {"user_id": '{"device_id":"0","session_id":"s"}'},
        "system": CC_SYSTEM,
        "messages": messages,
        "tools": CC_TOOLS,
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
    }


CLAUDE_CODE = [
    _claude_code(_CC_TURN_1),
    _claude_code([*_CC_TURN_1, *_CC_TURN_2]),
    _claude_code([*_CC_TURN_1, *_CC_TURN_2, *_CC_TURN_3]),
]

CODEX_TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}},
                "workdir": {"type": "string"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Use the `apply_patch` tool to edit files.",
        "format": {"type": "text"},
    },
    {"type": "web_search"},
]

_CX_TURN_1 = [
    {
        "type": "message",
        "role": "developer",
        "content": [
            {
                "type": "input_text",
                "text": "<permissions instructions>\nsandbox_mode: danger-full-access\n</permissions instructions>",
            }
        ],
    },
    {
        "type": "message",
        "role": "user",
        "content": [
            {
                "type": "input_text",
                "text": "<environment_context>\n  <cwd>/root/workspace</cwd>\n</environment_context>",
            }
        ],
    },
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Create hello.txt containing hi."}],
    },
]
_CX_TURN_2 = [
    {
        "type": "reasoning",
        "id": "rs_0a",
        "summary": [{"type": "summary_text", "text": "Planning a shell call"}],
        "content": [{"type": "reasoning_text", "text": "I will use the shell."}],
        "encrypted_content": None,
    },
    {
        "type": "function_call",
        "id": "fc_0a",
        "name": "shell",
        "arguments": '{"command":["bash","-lc","ls"]}',
        "call_id": "call_A",
    },
    {
        "type": "function_call_output",
        "call_id": "call_A",
        "output": '{"output":"","metadata":{"exit_code":0,"duration_seconds":0.0}}',
    },
]
_CX_TURN_3 = [
    {
        "type": "custom_tool_call",
        "id": "ctc_0b",
        "status": "completed",
        "call_id": "call_B",
        "name": "apply_patch",
        "input": "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n",
    },
    {
        "type": "custom_tool_call_output",
        "call_id": "call_B",
        "output": "Success. Updated the following files:\nA hello.txt\n",
    },
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
    },
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Now show it."}],
    },
]


def _codex(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "tiny",
        "instructions": "You are Codex, a coding agent. Be concise.",
        "input": items,
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1b2-c3d4",
        "max_output_tokens": 48,
    }


CODEX = [
    _codex(_CX_TURN_1),
    _codex([*_CX_TURN_1, *_CX_TURN_2]),
    _codex([*_CX_TURN_1, *_CX_TURN_2, *_CX_TURN_3]),
]
