"""The sample rollouts in ``data/rollouts``: one scenario per export rule, with its expected outcome.

``python -m tools.samples data/rollouts`` rewrites them; a test
checks the committed files equal what this module builds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from tools.fidelity import FIDELITY
from tools.rollouts import RolloutBuilder, assistant, call
from tools.sample_base import FAILED, PASSED, TASK, Expected, solve


def clean_pass(b: RolloutBuilder) -> dict[str, Any]:
    """Rule-abiding run: read the secret, write the answer, finish. Training-ready."""
    solve(b)
    return PASSED


def failed_run(b: RolloutBuilder) -> dict[str, Any]:
    """A clean run whose evaluation failed: training-ready, but --filter passed leaves it out."""
    b.step(
        assistant(
            "I will guess.",
            call("call_1", "terminal", command="echo pass:guess > ~/workspace/result.txt"),
        )
    )
    b.tool_output("call_1", "terminal", "[exit code 0]")
    b.step(assistant(None, call("call_2", "finish", message="Done.")))
    return FAILED


def retries(b: RolloutBuilder) -> dict[str, Any]:
    """Retries and restarts: a timed-out attempt (abandoned), then two completed copies of one request."""
    first = b.request()
    b.outcome(
        first, "abandoned", message=None, status=None, usage=False, error="client disconnected"
    )
    lost = b.request()  # same body: the agent's retry; its answer arrived after a client timeout
    b.outcome(lost, "completed", message=assistant(None, call("call_9", "terminal", command="ls")))
    solve(b)  # the retry that the agent actually used (same body again)
    return PASSED


def length_then_retry(b: RolloutBuilder) -> dict[str, Any]:
    """Completeness: a response cut by `length` is excluded as incomplete; the retry is kept."""
    cut = b.request()
    b.outcome(
        cut,
        "incomplete",
        message=assistant("Let me think about this very long"),
        finish_reason="length",
    )
    solve(b)
    return PASSED


def http_faults(b: RolloutBuilder) -> dict[str, Any]:
    """HTTP 500/429 and a refused connection are excluded with their own reasons."""
    for status, outcome in ((500, "http_error"), (429, "http_error"), (None, "upstream_error")):
        i = b.request()
        body = {"error": {"message": "server busy", "code": status}} if status else None
        b.outcome(
            i,
            outcome,
            status=status,
            usage=False,
            response=body,
            error=None if status else "upstream refused the connection",
        )
    solve(b)
    return PASSED


def fragments(b: RolloutBuilder) -> dict[str, Any]:
    """Tool-output fragments: a tool output split into two adjacent tool messages is merged (one repair)."""
    solve(b, fragments=2)
    return PASSED


def orphan_tool(b: RolloutBuilder) -> dict[str, Any]:
    """Tool-output fragments: a tool message answering no pending call makes the rollout not training-ready."""
    c1 = call("call_1", "terminal", command="cat ~/workspace/secret.txt")
    b.step(assistant(None, c1))
    b.tool_output("call_1", "terminal", "hunter2")
    b.tool_output("call_7", "terminal", "output of a call nobody made")
    b.step(assistant(None, call("call_2", "finish", message="Done.")))
    return PASSED


def moved_on(b: RolloutBuilder) -> dict[str, Any]:
    """Rules 2-3: an answer the agent never used (call_1) is dropped; call_10 is matched exactly."""
    b.step(assistant(None, call("call_1", "terminal", command="pwd")), consume=False)
    b.user("Please continue.")
    b.step(assistant(None, call("call_10", "terminal", command="cat ~/workspace/secret.txt")))
    b.tool_output("call_10", "terminal", "hunter2")
    b.step(assistant(None, call("call_11", "finish", message="Done.")))
    return PASSED


def crashed(b: RolloutBuilder) -> dict[str, Any]:
    """Fail closed: the proxy died before the last outcome; the request is excluded as no_outcome, rollout not ready."""
    solve(b, finish=False)
    b.request()  # the proxy died before the outcome was written
    return PASSED


def no_usage(b: RolloutBuilder) -> dict[str, Any]:
    """Fail closed: a completed response without usage makes the rollout not training-ready."""
    b.step(
        assistant(None, call("call_1", "terminal", command="cat ~/workspace/secret.txt")),
        usage=False,
    )
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant(None, call("call_2", "finish", message="Done.")))
    return PASSED


def incomplete_consumed(b: RolloutBuilder) -> dict[str, Any]:
    """Fail closed: a cut response the agent carried on from makes the rollout not training-ready."""
    b.step(assistant("I will read the file and then"), outcome="incomplete", finish_reason="length")
    b.user("Go on.")
    b.step(assistant(None, call("call_2", "finish", message="Done.")))
    return PASSED


def tool_conflict(b: RolloutBuilder) -> dict[str, Any]:
    """Tool union: one tool name with two schemas is a conflict: not training-ready."""
    b.step(assistant(None, call("call_1", "terminal", command="ls")))
    b.tool_output("call_1", "terminal", "secret.txt")
    b.tools[0]["function"]["description"] = "A different terminal."
    b.step(assistant(None, call("call_2", "finish", message="Done.")))
    return PASSED


def max_iterations(b: RolloutBuilder) -> dict[str, Any]:
    """Truncation: the iteration limit truncates the rollout: not training-ready."""
    for n in range(3):
        b.step(assistant(None, call(f"call_{n}", "terminal", command="sleep 1")))
        b.tool_output(f"call_{n}", "terminal", "[exit code 0]")
    return {**FAILED, "status": "failed", "stop_condition": "max_iterations"}


def condensed(b: RolloutBuilder) -> dict[str, Any]:
    """Branches: a summariser call, then the agent restarts from a summary (3 branches)."""
    b.step(assistant(None, call("call_1", "terminal", command="ls ~/workspace")))
    b.tool_output("call_1", "terminal", "secret.txt")
    b.step(assistant(None, call("call_2", "terminal", command="cat ~/workspace/secret.txt")))
    b.tool_output("call_2", "terminal", "hunter2")
    saved = b.messages
    b.messages = [
        {"role": "user", "content": [{"type": "text", "text": "Summarise the events so far."}]}
    ]
    tools = b.tools
    b.tools = []
    b.step(assistant("The secret is hunter2; result.txt is not written yet."), consume=False)
    b.tools = tools
    b.messages = (
        saved[:2]
        + [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Summary: the secret is hunter2."}],
            }
        ]
        + saved[-2:]
    )
    b.step(
        assistant(
            None, call("call_3", "terminal", command="echo pass:hunter2 > ~/workspace/result.txt")
        )
    )
    b.tool_output("call_3", "terminal", "[exit code 0]")
    b.step(assistant(None, call("call_4", "finish", message="Done.")))
    return PASSED


def reasoning(b: RolloutBuilder) -> dict[str, Any]:
    """Reasoning: server reasoning_content kept; a <think> block in content moved out of it."""
    c1 = call("call_1", "terminal", command="cat ~/workspace/secret.txt")
    b.step(assistant(None, c1, reasoning="The secret is in a file; read it."))
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(
        assistant(
            "<think>Now write the answer.</think>Writing it.",
            call("call_2", "terminal", command="echo pass:hunter2 > ~/workspace/result.txt"),
        )
    )
    b.tool_output("call_2", "terminal", "[exit code 0]")
    b.step(assistant(None, call("call_3", "finish", message="Done.")))
    return PASSED


def text_answer(b: RolloutBuilder) -> dict[str, Any]:
    """Retries and restarts: ends with a plain-text answer and no finish call; kept as safe."""
    c1 = call(
        "call_1",
        "terminal",
        command="cat ~/workspace/secret.txt && echo pass:$(cat ~/workspace/secret.txt) > ~/workspace/result.txt",
    )
    b.step(assistant(None, c1))
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant("I wrote pass:hunter2 to result.txt."))
    return PASSED


SCENARIOS: dict[str, tuple[Callable[[RolloutBuilder], dict[str, Any]], Expected]] = {
    "clean_pass": (clean_pass, Expected(True)),
    "failed_run": (failed_run, Expected(True)),
    "retries": (retries, Expected(True, {"abandoned": 1, "duplicate_retry": 1})),
    "length_then_retry": (length_then_retry, Expected(True, {"incomplete": 1})),
    "http_faults": (http_faults, Expected(True, {"http_error": 2, "upstream_error": 1})),
    "fragments": (fragments, Expected(True, repairs=1)),
    "orphan_tool": (orphan_tool, Expected(False, reason="answers no pending call")),
    "moved_on": (moved_on, Expected(True, {"unconsumed": 1})),
    "crashed": (crashed, Expected(False, {"no_outcome": 1}, reason="request without outcome")),
    "no_usage": (no_usage, Expected(False, reason="has no usage")),
    "incomplete_consumed": (incomplete_consumed, Expected(False, reason="was consumed")),
    "tool_conflict": (tool_conflict, Expected(False, reason="different schemas")),
    "max_iterations": (max_iterations, Expected(False, reason="truncated", truncated=True)),
    "condensed": (condensed, Expected(True, branches=3)),
    "reasoning": (reasoning, Expected(True)),
    "text_answer": (text_answer, Expected(True)),
    **FIDELITY,
}


def write_samples(root: Path) -> list[Path]:
    """Write every scenario's rollout under ``root`` and, beside them, ``expected.json``."""
    written = []
    expected: dict[str, Any] = {}
    for n, (name, (build, outcome)) in enumerate(SCENARIOS.items()):
        builder = RolloutBuilder(name, TASK, clock=1_764_000_000.0 + 1000 * n)
        result = build(builder)
        written.append(builder.write(root, result).root)
        expected[name] = {"about": (build.__doc__ or "").strip() or None, **asdict(outcome)}
    (Path(root) / "expected.json").write_bytes(
        orjson.dumps(expected, option=orjson.OPT_INDENT_2) + b"\n"
    )
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "data/rollouts")
    for path in write_samples(target):
        print(path)
