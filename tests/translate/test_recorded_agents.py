"""The real agents' recorded conversations (tests/vllm/fixtures): what they hold, and that
the translations carry every request of them.

The vLLM tier replays them against the real server; here they are checked to be what the
replay relies on, so that a fixture cut down or re-recorded without thinking fails at once.
"""

from __future__ import annotations

from typing import Any

import pytest

from contagent.wire.translate.anthropic_request import to_chat_request as messages_to_chat
from contagent.wire.translate.responses_request import to_chat_request as responses_to_chat
from tests.vllm import agent_fixtures
from tests.vllm.agent_fixtures import CLAUDE_CODE, CODEX, Recorded


def _blocks(req: Recorded) -> list[tuple[str, str]]:
    return [
        (m["role"], b["type"])
        for m in req.body["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
    ]


def test_claude_code_s_conversation_is_multi_turn_streamed_with_thinking_and_tools() -> None:
    assert [r.turn for r in CLAUDE_CODE] == [1, 2, 3]
    for req in CLAUDE_CODE:
        assert req.path == "/v1/messages?beta=true" and req.body["stream"] is True
        assert req.headers["anthropic-version"] == "2023-06-01"
        assert req.headers["user-agent"].startswith("claude-cli/2.1.332")
        roles = [m["role"] for m in req.body["messages"]]
        assert roles[:2] == ["user", "system"]  # its system message inside `messages`
        assert req.body["thinking"]["type"] == "adaptive"
        assert req.body["max_tokens"] == agent_fixtures.MAX_TOKENS  # the replay's only change
    last = _blocks(CLAUDE_CODE[-1])
    assert last.count(("assistant", "thinking")) == 2
    assert last.count(("assistant", "tool_use")) == 2 and last.count(("user", "tool_result")) == 2
    signatures = [
        b["signature"]
        for m in CLAUDE_CODE[-1].body["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b["type"] == "thinking"
    ]
    assert all(signatures), "Claude Code echoes each thinking block with its signature"
    # every request carries the whole history: the earlier answer comes back unchanged (only
    # the cache marker moves on to the newest block)
    assert CLAUDE_CODE[2].body["messages"][:3] == CLAUDE_CODE[1].body["messages"][:3]


def test_codex_s_conversation_is_multi_turn_streamed_with_reasoning_and_tools() -> None:
    assert [r.turn for r in CODEX] == [1, 2, 3]
    for req in CODEX:
        assert req.path == "/v1/responses" and req.body["stream"] is True
        assert req.body["store"] is False
        assert req.body["max_output_tokens"] == agent_fixtures.MAX_TOKENS
    kinds = [item["type"] for item in CODEX[-1].body["input"]]
    assert kinds.count("reasoning") == 2
    assert kinds.count("function_call") == 2 and kinds.count("function_call_output") == 2
    reasoning = [i for i in CODEX[-1].body["input"] if i["type"] == "reasoning"]
    assert all(r["content"][0]["type"] == "reasoning_text" for r in reasoning)
    assert CODEX[2].body["input"][: len(CODEX[1].body["input"])] == CODEX[1].body["input"]


@pytest.mark.parametrize("req", [*CLAUDE_CODE, *CODEX], ids=lambda r: r.id)
def test_the_translation_carries_every_recorded_request(req: Recorded) -> None:
    if req.agent == "claude_code":
        chat = messages_to_chat(req.body, merge_inline_system=False)
    else:
        chat = responses_to_chat(req.body)
    history = [m for m in chat["messages"] if m["role"] == "assistant"]
    assert all(m.get("reasoning") for m in history)  # the echoed thinking is kept
    assert chat["stream"] is True and chat["tools"]
    assert len(history) == req.turn - 1


def test_shape_keeps_structure_and_drops_free_values() -> None:
    body: dict[str, Any] = {"type": "text", "text": "s-0123", "n": 3, "stream": True}
    assert agent_fixtures.shape(body) == {"type": "text", "text": "str", "n": "int", "stream": True}
    assert agent_fixtures.shape([body, None]) == [agent_fixtures.shape(body), None]
