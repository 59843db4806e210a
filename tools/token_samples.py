"""Rollouts with token data, one per rule of the tokens format, with what each must give.

Each scenario plays :class:`~tools.token_rollouts.TokenRolloutBuilder`
and returns the rollout's ``result.json`` fields; :data:`TOKEN_SCENARIOS` pairs it with
the samples per branch, the breaks and the kinds its results row must show.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contagent.layout import RolloutPaths
from tools.rollouts import assistant, call
from tools.sample_base import FAILED, PASSED, TASK
from tools.token_rollouts import TokenRolloutBuilder

_CAT = {"command": "cat ~/workspace/secret.txt"}
_ECHO = {"command": "echo pass:hunter2 > ~/workspace/result.txt"}


def _solve(b: TokenRolloutBuilder) -> None:
    b.step(assistant("Let me read it.", call("call_1", "terminal", **_CAT), reasoning="A file."))
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant(None, call("call_2", "terminal", **_ECHO)))
    b.tool_output("call_2", "terminal", "[exit code 0]")
    b.step(assistant(None, call("call_3", "finish", message="Done.")))


def prefix_kept(b: TokenRolloutBuilder) -> dict[str, Any]:
    """A template that keeps the prefix: three steps make one sample."""
    b.body_extra = {"temperature": 0.7}
    _solve(b)
    return PASSED


def qwen3_breaks(b: TokenRolloutBuilder) -> dict[str, Any]:
    """Qwen3's template drops reasoning and re-renders tool calls: every step breaks."""
    b.template = "qwen3"
    _solve(b)
    return PASSED


def forked(b: TokenRolloutBuilder) -> dict[str, Any]:
    """A critic call forks off the first step: its sample starts with that step as context."""
    b.step(assistant(None, call("call_1", "terminal", **_CAT), reasoning="In a file."))
    b.tool_output("call_1", "terminal", "hunter2")
    main = list(b.messages)
    b.user("Critic: is the agent on track? Answer yes or no.")
    b.step(assistant("yes"), consume=False)
    b.messages = main
    b.step(assistant(None, call("call_2", "terminal", **_ECHO)))
    b.tool_output("call_2", "terminal", "[exit code 0]")
    b.step(assistant(None, call("call_3", "finish", message="Done.")))
    return PASSED


def cut_by_limit(b: TokenRolloutBuilder) -> dict[str, Any]:
    """The iteration limit cut the rollout: its samples are written, marked truncated."""
    for n in range(3):
        b.step(assistant(None, call(f"call_{n}", "terminal", command="sleep 1")))
        b.tool_output(f"call_{n}", "terminal", "[exit code 0]")
    return {**FAILED, "status": "failed", "stop_condition": "max_iterations"}


def failed_tokens(b: TokenRolloutBuilder) -> dict[str, Any]:
    """A failed rollout: RL needs it (``--filter all``)."""
    b.step(assistant("I will guess.", call("call_1", "terminal", command="echo pass:x > r")))
    b.tool_output("call_1", "terminal", "[exit code 0]")
    b.step(assistant(None, call("call_2", "finish", message="Done.")))
    return FAILED


def constrained_step(b: TokenRolloutBuilder) -> dict[str, Any]:
    """A step under ``tool_choice: required`` has its sampled tokens marked constrained."""
    b.body_extra = {"tool_choice": "required"}
    b.step(assistant(None, call("call_1", "terminal", **_CAT)))
    b.tool_output("call_1", "terminal", "hunter2")
    b.body_extra = {}
    b.step(assistant(None, call("call_2", "terminal", **_ECHO)))
    b.tool_output("call_2", "terminal", "[exit code 0]")
    b.step(assistant(None, call("call_3", "finish", message="Done.")))
    return PASSED


def _spoilt(kind: str) -> Callable[[TokenRolloutBuilder], dict[str, Any]]:
    def scenario(b: TokenRolloutBuilder) -> dict[str, Any]:
        b.step(assistant(None, call("call_1", "terminal", **_CAT)))
        b.tool_output("call_1", "terminal", "hunter2")
        b.spoil = kind
        b.step(assistant(None, call("call_2", "finish", message="Done.")))
        return PASSED

    scenario.__doc__ = f"A kept step whose token data is wrong ({kind}): no samples."
    return scenario


@dataclass(frozen=True)
class TokenExpected:
    samples: tuple[int, ...]
    """Samples per branch."""
    breaks: tuple[int, ...] = ()
    """Exchange index of each prefix break."""
    kinds: tuple[str, ...] = ()
    written: bool = True
    """Does ``--filter all`` write its samples?"""


TOKEN_SCENARIOS: dict[
    str, tuple[Callable[[TokenRolloutBuilder], dict[str, Any]], TokenExpected]
] = {
    "prefix_kept": (prefix_kept, TokenExpected((1,))),
    "qwen3_breaks": (qwen3_breaks, TokenExpected((3,), breaks=(1, 2))),
    "forked": (forked, TokenExpected((1, 1))),
    "cut_by_limit": (cut_by_limit, TokenExpected((1,))),
    "failed_tokens": (failed_tokens, TokenExpected((1,))),
    "constrained_step": (constrained_step, TokenExpected((1,))),
    "no_tokens": (_spoilt("no_tokens"), TokenExpected((0,), kinds=("no_tokens",), written=False)),
    "token_mismatch": (
        _spoilt("token_mismatch"),
        TokenExpected((0,), kinds=("token_mismatch",), written=False),
    ),
    "no_logprobs": (
        _spoilt("no_logprobs"),
        TokenExpected((0,), kinds=("no_logprobs",), written=False),
    ),
}


def build_token_rollout(root: Path, name: str) -> RolloutPaths:
    scenario, _ = TOKEN_SCENARIOS[name]
    b = TokenRolloutBuilder(name, TASK)
    result = scenario(b)
    return b.write(
        root,
        {
            "experiment": "exp_tokens",
            "duration_s": 42.0,
            "started": 1_764_000_000.0,
            "ended": 1_764_000_042.0,
            **result,
        },
    )


def build_token_rollouts(root: Path) -> list[RolloutPaths]:
    return [build_token_rollout(root, name) for name in TOKEN_SCENARIOS]
