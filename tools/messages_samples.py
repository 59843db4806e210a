"""The sample rollouts on the Anthropic Messages API, in ``data/rollouts/messages``.

Every chat scenario of :mod:`tools.samples` is recorded again as
Claude Code would have sent it (:mod:`tools.messages_records`), with
the same expected outcome: each rule of the chat path, on the Messages path.
Beside them, the cases only this API has: thinking with signatures and a
redacted one, a system message inside ``messages`` (blocks first, a string
later), cache usage, a tool error, a refusal, a stream cut before
``message_stop``, a ``count_tokens`` call, and a rollout mixing both APIs.
``python -m tools.messages_samples data/rollouts/messages``
rewrites them; a test checks the committed files equal what this module builds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from contagent.testing.llm_moves import Reply, StubRequest, ToolCall
from contagent.testing.messages_moves import message_events
from contagent.wire.stream_fold import StreamAssembler
from tools.messages_records import CACHE, Lines, edit, records
from tools.rollouts import RolloutBuilder, assistant, call
from tools.sample_base import PASSED, TASK, Expected, solve
from tools.samples import SCENARIOS

_CAT = {"command": "cat ~/workspace/secret.txt"}
_ECHO = {"command": "echo pass:hunter2 > ~/workspace/result.txt"}


def thinking(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """Thinking blocks with their signatures, answered and echoed back: kept as reasoning."""
    b.step(assistant(None, call("call_1", "terminal", **_CAT), reasoning="It is in a file."))
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant(None, call("call_2", "terminal", **_ECHO), reasoning="Write the answer."))
    b.tool_output("call_2", "terminal", "[exit code 0]")
    b.step(assistant(None, call("call_3", "finish", message="Done.")))
    return records(b), PASSED


def redacted_thinking(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """Redacted thinking is reasoning nobody can read back: fail closed, not ready."""
    solve(b)
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}

    def change(rec: dict[str, Any]) -> None:
        if rec["type"] == "outcome" and rec["index"] == 0:
            rec["response"]["content"].insert(0, dict(redacted))
        elif rec["type"] == "request" and rec["index"] > 0:
            rec["body"]["messages"][1]["content"].insert(0, dict(redacted))

    return edit(records(b), change), PASSED


def system_in_messages(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """Claude Code's system message inside `messages`, blocks at first and a string later,
    the cache marker moving every turn: one branch, training-ready."""
    env = "<env>cwd: /root/workspace</env>\n<skills>none</skills>"
    b.messages.insert(2, {"role": "system", "content": env})
    solve(b)

    def change(rec: dict[str, Any]) -> None:
        if rec["type"] == "request" and rec["index"] == 0:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in env.split("\n")]
            blocks[-1]["cache_control"] = dict(CACHE)
            rec["body"]["messages"][1]["content"] = blocks

    return edit(records(b), change), PASSED


def cache_usage(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """Prompt caching: prompt tokens are input_tokens plus both cache counts."""
    solve(b)

    def change(rec: dict[str, Any]) -> None:
        if rec["type"] == "outcome":
            first = rec["index"] == 0
            counts = {
                "input_tokens": 12,
                "cache_creation_input_tokens": 900 if first else 40,
                "cache_read_input_tokens": 0 if first else 900 + 40 * (rec["index"] - 1),
                "output_tokens": 30,
            }
            rec["usage"] = rec["response"]["usage"] = counts

    return edit(records(b), change), PASSED


def tool_error(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """A tool result with `is_error: true` is a tool message like any other, its flag kept."""
    solve(b)

    def change(rec: dict[str, Any]) -> None:
        if rec["type"] == "request":
            for m in rec["body"]["messages"]:
                for block in m["content"] if isinstance(m["content"], list) else []:
                    if block.get("tool_use_id") == "call_2":
                        block["is_error"] = True

    return edit(records(b), change), PASSED


def refusal(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """stop_reason `refusal` is incomplete; the agent's retry is kept."""
    refused = b.request()
    b.outcome(refused, "completed", message=assistant("I can't help with that."))
    solve(b)

    def change(rec: dict[str, Any]) -> None:
        if rec["type"] == "outcome" and rec["index"] == refused:
            rec["response"]["stop_reason"] = "refusal"

    return edit(records(b), change), PASSED


def cut_stream(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """A stream that ended before `message_stop` is incomplete, whatever `message_delta`
    said; the agent's retry is kept."""
    cut = b.request(stream=True)
    reply = Reply(content=None, tool_calls=[ToolCall("terminal", _CAT, id="toolu_cut")])
    req = StubRequest(cut, "POST", "/v1/messages", {}, b"{}", {"model": b.model})
    events = [
        data for name, data in message_events(req, reply, "msg_cut") if name != "message_stop"
    ]
    asm = StreamAssembler()
    asm.feed_many(events)
    b.outcome(cut, "incomplete", response=asm.result(), usage=asm.usage, stream_events=events)
    solve(b)
    return records(b), PASSED


def count_tokens(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """`POST /v1/messages/count_tokens` is not a generation: excluded by its route."""
    probe = b.request()
    b.outcome(probe, "completed", usage=False, response={"input_tokens": 1234})
    solve(b)

    def change(rec: dict[str, Any]) -> None:
        if rec["index"] == probe and rec["type"] == "request":
            rec["path"] = "/v1/messages/count_tokens?beta=true"
            rec["body"] = {k: v for k, v in rec["body"].items() if k != "max_tokens"}

    return edit(records(b), change), PASSED


def mixed(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
    """One rollout, both APIs: the agent on Messages, a summariser call on chat completions."""
    b.step(assistant(None, call("call_1", "terminal", **_CAT)))
    b.tool_output("call_1", "terminal", "hunter2")
    saved, tools = b.messages, b.tools
    b.messages, b.tools = [{"role": "user", "content": "Summarise the events so far."}], []
    b.step(assistant("The secret is hunter2."), consume=False)
    b.messages, b.tools = saved, tools
    b.step(assistant(None, call("call_2", "finish", message="Done.")))
    return records(b, keep=frozenset({1})), PASSED


Own = Callable[[RolloutBuilder], tuple[Lines, dict[str, Any]]]
OWN: dict[str, tuple[Own, Expected]] = {
    "thinking": (thinking, Expected(True)),
    "redacted_thinking": (
        redacted_thinking,
        Expected(False, reason="redacted_thinking", kinds=("unsupported_item",)),
    ),
    "system_in_messages": (system_in_messages, Expected(True)),
    "cache_usage": (cache_usage, Expected(True)),
    "tool_error": (tool_error, Expected(True)),
    "refusal": (refusal, Expected(True, {"incomplete": 1})),
    "cut_stream": (cut_stream, Expected(True, {"incomplete": 1})),
    "count_tokens": (count_tokens, Expected(True, {"unsupported_route": 1})),
    "mixed": (mixed, Expected(True, branches=2)),
}

#: Chat scenarios about the chat wire's own shapes (the legacy ``function_call``, the
#: ``reasoning`` field name), which have no Messages form.
CHAT_ONLY = frozenset({"legacy_function_call", "reasoning_field"})
#: The chat scenarios recorded again on the Messages API.
RECORDED_AGAIN = {name: s for name, s in SCENARIOS.items() if name not in CHAT_ONLY}
#: Where the reason names the Messages block instead of the chat part.
_REASONS = {"image_part": "(image)"}


def expectations() -> dict[str, Expected]:
    """Expected outcome of every Messages sample, by rollout id."""
    out = {}
    for name, (_, expected) in RECORDED_AGAIN.items():
        reason = _REASONS.get(name, expected.reason)
        out[f"messages_{name}"] = Expected(**{**asdict(expected), "reason": reason})
    out.update({f"messages_{name}": expected for name, (_, expected) in OWN.items()})
    return out


def write_messages_samples(root: Path) -> list[Path]:
    """Write every Messages sample under ``root`` and, beside them, ``expected.json``."""
    root = Path(root)
    written: list[Path] = []
    expected: dict[str, Any] = {}
    wanted = expectations()
    builds: list[tuple[str, Own, float]] = []
    for n, (name, (chat, _)) in enumerate(RECORDED_AGAIN.items()):
        builds.append((name, _recorded_again(chat), 1_767_000_000.0 + 1000 * n))
    for n, (name, (own, _)) in enumerate(OWN.items()):
        builds.append((name, own, 1_768_000_000.0 + 1000 * n))
    for name, play, clock in builds:
        rid = f"messages_{name}"
        b = RolloutBuilder(rid, TASK, clock=clock)
        lines, result = play(b)
        b.lines = lines
        written.append(b.write(root, result).root)
        expected[rid] = {
            "about": play.__doc__.strip() if play.__doc__ else None,
            **asdict(wanted[rid]),
        }
    (root / "expected.json").write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2) + b"\n")
    return written


def _recorded_again(build: Callable[[RolloutBuilder], dict[str, Any]]) -> Own:
    def run(b: RolloutBuilder) -> tuple[Lines, dict[str, Any]]:
        result = build(b)
        return records(b), result

    run.__doc__ = build.__doc__
    return run


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "data/rollouts/messages")
    for path in write_messages_samples(target):
        print(path)
