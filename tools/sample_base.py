"""What the sample rollouts share: the task, the result.json verdicts, the solving moves,
and the expected outcome each sample declares."""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.rollouts import RolloutBuilder, assistant, call

TASK = (
    "A file ~/workspace/secret.txt holds a secret. Write `pass:<secret>` to ~/workspace/result.txt."
)
PASSED = {
    "experiment": "exp_001",
    "status": "passed",
    "passed": True,
    "reward": 1.0,
    "stop_condition": "finished",
    "started": 1764000000.0,
    "ended": 1764000042.0,
    "duration_s": 42.0,
}
FAILED = {**PASSED, "status": "failed", "passed": False, "reward": 0.0}


@dataclass(frozen=True)
class Expected:
    training_ready: bool
    excluded: dict[str, int] = field(default_factory=dict)
    branches: int = 1
    repairs: int = 0
    reason: str | None = None  # a substring of training_ready_reason
    truncated: bool = False
    kinds: tuple[str, ...] = ()  # not_ready_kinds exactly (checked when not empty)


def solve(b: RolloutBuilder, *, fragments: int = 1, finish: bool = True) -> None:
    """The three moves that solve exp_001."""
    c1 = call("call_1", "terminal", command="cat ~/workspace/secret.txt")
    b.step(assistant("Let me read the secret.", c1))
    b.tool_output("call_1", "terminal", "hunter2\n[exit code 0]", fragments=fragments)
    c2 = call("call_2", "terminal", command="echo pass:hunter2 > ~/workspace/result.txt")
    b.step(assistant(None, c2))
    b.tool_output("call_2", "terminal", "[exit code 0]")
    if finish:
        b.step(assistant(None, call("call_3", "finish", message="Wrote pass:hunter2.")))
