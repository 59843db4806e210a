"""What a run reports: its progress events and its summary (verdicts, exit code and reason)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from contagent.rawlog.result import RolloutResult
from contagent.runner.stopping.signals import signal_name
from contagent.runner.tasks.experiment import ExperimentProblem


@dataclass(frozen=True)
class RunEvent:
    """A progress notification: ``kind`` is planned, problem, skipped, started, finished,
    leftovers (of an earlier run), stopping (on a signal), left (what is still in Docker),
    or about the LLM server: waiting (a status line), ready, paused, stopped."""

    kind: str
    name: str = ""
    total: int = 0
    result: RolloutResult | None = None
    message: str = ""


@dataclass
class RunSummary:
    run_id: str
    log_dir: Path
    results: list[RolloutResult] = field(default_factory=list)
    resumed: list[RolloutResult] = field(default_factory=list)
    problems: list[ExperimentProblem] = field(default_factory=list)
    wall_s: float = 0.0
    interrupted: bool = False
    #: the signal that interrupted the run (SIGINT for Ctrl-C)
    signal: int | None = None
    #: why the run stopped early (the LLM server stayed unusable), and what it did not start
    stopped: str | None = None
    not_started: list[str] = field(default_factory=list)
    #: what of the run is still in this host's engine at the end; None: the engine did not say
    left: list[str] | None = field(default_factory=list)

    @property
    def infra_errors(self) -> list[RolloutResult]:
        return [r for r in self.results if r.status == "infra_error"]

    @property
    def ok(self) -> bool:
        """Every rollout reached a verdict (failed verdicts are data) and no experiment was bad."""
        return (
            not self.problems
            and not self.interrupted
            and self.stopped is None
            and not self.infra_errors
        )

    @property
    def exit_code(self) -> int:
        """0: every rollout reached a verdict; 1: a bad experiment, an infra_error, a stop;
        128 plus the signal's number when a signal interrupted it."""
        if self.interrupted:
            return 128 + (self.signal or 2)
        return 0 if self.ok else 1

    def exit_reason(self) -> str:
        if self.ok:
            return "exit 0: every rollout reached a verdict"
        parts = []
        if self.problems:
            parts.append(f"{len(self.problems)} experiment(s) skipped as invalid")
        if self.infra_errors:
            parts.append(f"{len(self.infra_errors)} rollout(s) infra_error")
        if self.not_started:
            parts.append(f"{len(self.not_started)} rollout(s) not started")
        if self.interrupted:
            parts.append(f"interrupted by {signal_name(self.signal or 2)}")
        return f"exit {self.exit_code}: " + ", ".join(parts) + " (--resume runs what is left)"

    def totals(self) -> tuple[int, int, int]:
        """(rollouts passed, rollouts, tokens used) over this run's and the resumed ones."""
        everything = [*self.resumed, *self.results]
        passed = sum(r.status == "passed" for r in everything)
        used = sum(r.tokens.total_tokens for r in everything if r.tokens is not None)
        return passed, len(everything), used
