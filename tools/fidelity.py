"""Sample rollouts shaped like real models, agents and harnesses: one per fidelity rule.

Kimi-style positional call ids, parallel calls, harness restarts, side calls,
list content, images, legacy ``function_call``, vLLM's ``reasoning`` field, few-shot
demos, corrupt usage, a cut final generation, an unreadable chat body, a torn line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from tools.rollouts import RolloutBuilder, assistant, call, parts
from tools.sample_base import PASSED, TASK, Expected, solve

_CAT = {"command": "cat ~/workspace/secret.txt"}
_ECHO = {"command": "echo pass:hunter2 > ~/workspace/result.txt"}


def _finish(b: RolloutBuilder, call_id: str = "call_9") -> None:
    b.step(assistant(None, call(call_id, "finish", message="Done.")))


def kimi_ids(b: RolloutBuilder) -> dict[str, Any]:
    """Call identity: a retry reuses the positional id `functions.terminal:0` with other
    arguments; id, name and arguments tell which answer the agent executed."""
    first = b.request()
    b.outcome(
        first,
        "completed",
        message=assistant(None, call("functions.terminal:0", "terminal", command="ls")),
    )
    b.step(assistant(None, call("functions.terminal:0", "terminal", **_CAT)))
    b.tool_output("functions.terminal:0", "terminal", "hunter2")
    b.step(assistant(None, call("functions.terminal:1", "terminal", **_ECHO)))
    b.tool_output("functions.terminal:1", "terminal", "[exit code 0]")
    _finish(b, "functions.finish:2")
    return PASSED


def repeated_ids(b: RolloutBuilder) -> dict[str, Any]:
    """Call identity: two answers carry the very same call (id, name, arguments) and the history
    replays it; which answer was executed cannot be decided: not ready."""
    same = call("functions.terminal:0", "terminal", **_CAT)
    b.step(assistant(None, same))
    b.tool_output("functions.terminal:0", "terminal", "hunter2")
    b.user("Read it once more.")
    b.step(assistant(None, same))
    b.tool_output("functions.terminal:0", "terminal", "hunter2")
    _finish(b, "functions.finish:1")
    return PASSED


def parallel_calls(b: RolloutBuilder) -> dict[str, Any]:
    """Parallel calls: one answer with two calls, answered in the other order: consumed."""
    b.step(
        assistant(
            None, call("call_1", "terminal", **_CAT), call("call_2", "terminal", command="ls")
        )
    )
    b.tool_output("call_2", "terminal", "secret.txt")
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant(None, call("call_3", "terminal", **_ECHO)))
    b.tool_output("call_3", "terminal", "[exit code 0]")
    _finish(b)
    return PASSED


def parallel_partial(b: RolloutBuilder) -> dict[str, Any]:
    """Parallel calls: the agent executed one of two calls; never dropped as unconsumed: not ready."""
    c1, c2 = call("call_1", "terminal", **_CAT), call("call_2", "terminal", command="rm -rf /tmp/x")
    b.step(assistant(None, c1, c2), consume=False)
    b.replay(assistant(None, c1))
    b.tool_output("call_1", "terminal", "hunter2")
    _finish(b)
    return PASSED


def unanswered_call(b: RolloutBuilder) -> dict[str, Any]:
    """Parallel calls: both calls replayed, one never answered before the next turn: not ready."""
    b.step(
        assistant(
            None, call("call_1", "terminal", **_CAT), call("call_2", "terminal", command="ls")
        )
    )
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant(None, call("call_3", "terminal", **_ECHO)))
    b.tool_output("call_3", "terminal", "[exit code 0]")
    _finish(b)
    return PASSED


def restart(b: RolloutBuilder) -> dict[str, Any]:
    """Retry vs restart: the harness restarted at the second step, so one request was answered
    twice and both answers were used; each is kept, on its own branch."""
    b.step(assistant(None, call("call_1", "terminal", **_CAT)))
    b.tool_output("call_1", "terminal", "hunter2")
    saved = list(b.messages)
    b.step(assistant(None, call("call_2", "terminal", **_ECHO)))
    b.tool_output("call_2", "terminal", "[exit code 0]")
    lost = b.request()  # the harness died waiting for this answer
    b.outcome(lost, "abandoned", status=None, usage=False, error="client disconnected")
    b.messages = saved
    b.step(assistant(None, call("call_5", "terminal", **_ECHO)))
    b.tool_output("call_5", "terminal", "[exit code 0]")
    _finish(b)
    return PASSED


def side_call(b: RolloutBuilder) -> dict[str, Any]:
    """Branches: a critic call forks off the first step; the main line still extends that step
    and keeps the model's own turn with its reasoning."""
    b.step(
        assistant(None, call("call_1", "terminal", **_CAT), reasoning="The secret is in a file.")
    )
    b.tool_output("call_1", "terminal", "hunter2")
    main = list(b.messages)
    b.user("Critic: is the agent on track? Answer yes or no.")
    b.step(assistant("yes"), consume=False)
    b.messages = main
    b.step(assistant(None, call("call_2", "terminal", **_ECHO)))
    b.tool_output("call_2", "terminal", "[exit code 0]")
    _finish(b)
    return PASSED


def content_parts(b: RolloutBuilder) -> dict[str, Any]:
    """What the model saw: text parts are joined with a newline, as vLLM renders them."""
    b.messages[1] = {"role": "user", "content": parts(TASK) + parts("Use the terminal.")}
    solve(b)
    return PASSED


def image_part(b: RolloutBuilder) -> dict[str, Any]:
    """What the model saw: an image part cannot be written to a string-content row: not ready."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    b.messages[1] = {"role": "user", "content": [*parts(TASK), image]}
    solve(b)
    return PASSED


def legacy_function_call(b: RolloutBuilder) -> dict[str, Any]:
    """What the model saw: a legacy `function_call` answer never becomes an empty turn: not ready."""
    solve(b, finish=False)
    fc = {"name": "finish", "arguments": '{"message": "Done."}'}
    b.step(
        {"role": "assistant", "content": None, "function_call": fc}, finish_reason="function_call"
    )
    return PASSED


def reasoning_field(b: RolloutBuilder) -> dict[str, Any]:
    """What the model saw: vLLM >= 0.11's `reasoning` field is kept as reasoning_content."""
    first = assistant(None, call("call_1", "terminal", **_CAT))
    first["reasoning"] = "The secret is in a file; read it."
    b.step(first)
    b.tool_output("call_1", "terminal", "hunter2")
    second = assistant(None, call("call_2", "terminal", **_ECHO))
    second["reasoning"] = second["reasoning_content"] = "Write the answer."
    b.step(second)
    b.tool_output("call_2", "terminal", "[exit code 0]")
    _finish(b)
    return PASSED


def few_shot_bad_args(b: RolloutBuilder) -> dict[str, Any]:
    """What the model saw: unparseable arguments in a few-shot demo of the history: not ready."""
    demo = {
        "id": "demo_1",
        "type": "function",
        "function": {"name": "terminal", "arguments": "{command: ls}"},
    }
    b.messages[1:1] = [
        {"role": "user", "content": parts("Example: list the files.")},
        {"role": "assistant", "content": parts(""), "tool_calls": [demo]},
        {"role": "tool", "tool_call_id": "demo_1", "name": "terminal", "content": parts("a.txt")},
    ]
    solve(b)
    return PASSED


def bad_usage(b: RolloutBuilder) -> dict[str, Any]:
    """Plausible usage: a total that is not prompt + completion is corrupt, like no usage."""
    bad = {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 10}
    b.step(assistant(None, call("call_1", "terminal", **_CAT)), usage=bad)
    b.tool_output("call_1", "terminal", "hunter2")
    _finish(b)
    return PASSED


def final_cut(b: RolloutBuilder) -> dict[str, Any]:
    """Truncation: the final generation was cut by `length` with nothing after it: truncated."""
    solve(b, finish=False)
    cut = b.request()
    b.outcome(cut, "incomplete", message=assistant("I will now finish by"), finish_reason="length")
    return PASSED


def unreadable_body(b: RolloutBuilder) -> dict[str, Any]:
    """Route decides: a chat body orjson refuses (a lone surrogate escape) is not an
    unsupported route, and the step before keeps its consumption evidence: not ready."""
    b.step(assistant(None, call("call_1", "terminal", **_CAT)))
    b.tool_output("call_1", "terminal", "hunter2 LONE")
    body = {"messages": b.messages, "model": b.model, "tools": b.tools}
    text = orjson.dumps(body).decode().replace("LONE", "\\udcff")
    last = b.request(body_text=text)
    b.outcome(last, "completed", message=assistant(None, call("call_2", "finish", message="Done.")))
    return PASSED


def torn_line(b: RolloutBuilder) -> dict[str, Any]:
    """The reader: a line torn by a crash and fenced off by the proxy's restart is read past."""
    solve(b, finish=False)
    b.raw_line(b'{"schema_version":1,"type":"request","index":2,"rollout_id":"torn_line","ti')
    _finish(b)
    return PASSED


Scenario = tuple[Callable[[RolloutBuilder], dict[str, Any]], Expected]

FIDELITY: dict[str, Scenario] = {
    "kimi_ids": (kimi_ids, Expected(True, {"duplicate_retry": 1})),
    "repeated_ids": (
        repeated_ids,
        Expected(False, reason="cannot be decided", kinds=("ambiguous_call_id",)),
    ),
    "parallel_calls": (parallel_calls, Expected(True)),
    "parallel_partial": (
        parallel_partial,
        Expected(False, branches=2, reason="never replayed", kinds=("partial_execution",)),
    ),
    "unanswered_call": (
        unanswered_call,
        Expected(False, reason="left unanswered", kinds=("unanswered_tool_call",)),
    ),
    "restart": (restart, Expected(True, {"abandoned": 1}, branches=2)),
    "side_call": (side_call, Expected(True, branches=2)),
    "content_parts": (content_parts, Expected(True)),
    "image_part": (image_part, Expected(False, reason="image_url", kinds=("non_text_content",))),
    "legacy_function_call": (
        legacy_function_call,
        Expected(False, reason="legacy function_call", kinds=("legacy_function_call",)),
    ),
    "reasoning_field": (reasoning_field, Expected(True)),
    "few_shot_bad_args": (
        few_shot_bad_args,
        Expected(False, reason="not a JSON object (demo_1)", kinds=("bad_tool_arguments",)),
    ),
    "bad_usage": (bad_usage, Expected(False, reason="has no usage", kinds=("missing_usage",))),
    "final_cut": (
        final_cut,
        Expected(
            False,
            {"incomplete": 1},
            reason="final generation 2 was cut",
            truncated=True,
            kinds=("truncated",),
        ),
    ),
    "unreadable_body": (
        unreadable_body,
        Expected(
            False,
            {"unreadable_request": 1},
            reason="cannot be read",
            kinds=("unreadable_request",),
        ),
    ),
    "torn_line": (torn_line, Expected(False, reason="line 5 is torn", kinds=("torn_line",))),
}
