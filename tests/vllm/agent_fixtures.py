"""Claude Code's and Codex's conversations, request by request, as the real agents sent them.

``fixtures/claude_code.json`` and ``fixtures/codex.json`` were recorded from the real agents
(Claude Code 2.1.332 and Codex 0.171.0 in their runner images) through the recording proxy,
by ``python -m tests.vllm.record_agents``, which says how: each is one ``exp_001`` rollout
against the scripted stand-in, whose model thinks before every answer and calls a shell tool
twice before a final text answer. So each holds three streamed requests, each carrying the
whole history, with what the agents send back: Claude Code's billing-header system blocks,
its system message inside ``messages``, ``thinking`` blocks with their signatures,
``tool_use`` / ``tool_result``; Codex's developer messages, ``reasoning`` items with their
``reasoning_text``, ``function_call`` / ``function_call_output`` and its full tool list.

The replay changes three things, and only these, so that the tier's tiny model (a
context of 32768 tokens, :data:`MAX_MODEL_LEN`) answers them fast and alike on both routes:

- ``model`` -> the tier's served name;
- ``max_tokens`` (Claude Code asks for 32000) and ``max_output_tokens`` (Codex sets none)
  -> :data:`MAX_TOKENS`;
- the tests add ``temperature: 0`` (greedy; Messages has no ``seed``).

The recorded headers (``anthropic-version``, ``anthropic-beta``, ``user-agent``, ...) are
sent with each request as the agents sent them.

:mod:`tests.vllm.route_cases` varies some of them (:meth:`Recorded.varied`: a tool choice,
thinking off) so that the tiny model answers in text or calls a tool.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from tests.vllm.server import SERVED_NAME

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: what the replay lets the tiny model sample, per answer
MAX_TOKENS = 48
#: the replay server's context: Claude Code's requests are about 22,000 tiny-model tokens
MAX_MODEL_LEN = 32768
#: headers the replay does not resend (the HTTP client sets its own)
_TRANSPORT = frozenset({"content-type", "content-length", "accept-encoding", "host"})


@dataclass(frozen=True)
class Recorded:
    """One recorded request, normalised for the replay."""

    agent: str
    turn: int
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    #: the name of what :meth:`varied` changed ("": the request as recorded)
    variant: str = ""

    @property
    def id(self) -> str:
        return f"{self.agent}-turn{self.turn}" + (f"-{self.variant}" if self.variant else "")

    def varied(self, variant: str, **change: Any) -> Recorded:
        """The request with top-level fields set (a tool choice, thinking off), named."""
        return replace(self, variant=variant, body={**self.body, **change})

    def ending(self, stop: str, limit: int) -> dict[str, Any]:
        """The body with a stop string and a higher token limit: a random model ends an answer
        on a stop string long before ``limit``, where it would run into :data:`MAX_TOKENS`
        (an answer cut by the limit is never trained on)."""
        if self.agent == "claude_code":
            return {**self.body, "stop_sequences": [stop], "max_tokens": limit}
        return {**self.body, "stop": [stop], "max_output_tokens": limit}


def _normalised(body: dict[str, Any], limit: str) -> dict[str, Any]:
    return {**body, "model": SERVED_NAME, limit: MAX_TOKENS}


def load(agent: str) -> list[Recorded]:
    """The agent's recorded requests, in order (``agent``: ``claude_code`` or ``codex``)."""
    fixture = orjson.loads((FIXTURES / f"{agent}.json").read_bytes())
    limit = "max_tokens" if agent == "claude_code" else "max_output_tokens"
    return [
        Recorded(
            agent=agent,
            turn=n + 1,
            path=req["path"],
            headers={k: v for k, v in req["headers"].items() if k not in _TRANSPORT},
            body=_normalised(req["body"], limit),
        )
        for n, req in enumerate(fixture["requests"])
    ]


CLAUDE_CODE = load("claude_code")
CODEX = load("codex")


def shape(value: Any, key: str = "") -> Any:
    """``value`` with its free text and numbers replaced by their type: what stays the same
    when the agent is recorded again (keys, block and item types, roles, list lengths)."""
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if key in ("type", "role", "name") or isinstance(value, bool) or value is None:
        return value
    return type(value).__name__
