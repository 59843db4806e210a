"""One rollout of a Harbor task: its phases (``harbor_phases``), and its verdict from what
they left (the outcome); the shared lifecycle
(:mod:`contagent.runner.lifecycle.rollout_lifecycle`) does the rest.

The reward is read from ``/logs/verifier/reward.json`` (named numbers, ``reward``
the main one), else ``reward.txt``; ``passed`` is reward == 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contagent.agents import Agent
from contagent.rawlog.result import ExitCodes, LlmSettings, RolloutStatus
from contagent.runner.lifecycle.rollout import RolloutPlan, RunContext, write_file
from contagent.runner.lifecycle.rollout_lifecycle import PhaseFacts
from contagent.runner.tasks.harbor_phases import Outcome, run_phases
from contagent.runner.tasks.harbor_task import HarborTask


def _verdict(out: Outcome) -> tuple[RolloutStatus, str | None]:
    if out.setup_error is not None:
        return "infra_error", out.setup_error
    if out.verifier_timed_out:
        return "timeout", f"the verifier ran past {out.verifier_limit} and was stopped"
    if out.reward_error is not None:
        return "infra_error", out.reward_error
    if out.agent_timed_out:
        return "timeout", f"the agent ran past {out.agent_limit} and was stopped"
    if out.codes.get("agent") not in (0, None):
        return "agent_error", f"the agent exited {out.codes['agent']}"
    return ("passed", None) if out.reward == 1 else ("failed", None)


class HarborPhases:
    """A Harbor task's rollout: the sandbox, the agent, the verifier (``harbor_phases``)."""

    def __init__(self, ctx: RunContext, plan: RolloutPlan, agent: Agent) -> None:
        assert isinstance(plan.experiment, HarborTask)
        self.ctx, self.plan, self.agent, self.task = ctx, plan, agent, plan.experiment
        self.out = Outcome()

    @property
    def image(self) -> str | None:
        return self.out.image

    @property
    def llm(self) -> LlmSettings | None:
        return self.out.llm

    def run(self, prefix: str, net: Any, proxy: Any, collected: Path) -> None:
        run_phases(self.ctx, self.plan, self.agent, self.out, (prefix, net, proxy), collected)

    def verdict(self) -> tuple[RolloutStatus, str | None]:
        return _verdict(self.out)

    def write_files(self, collected: Path, status: RolloutStatus, error: str | None) -> None:
        paths, name = self.ctx.paths, self.plan.name
        write_file(paths.err(name), _read(collected / "out" / "agent.stderr").encode())
        verifier_log = _read(collected / "verifier" / "test-stdout.txt")
        text = f"== tests/test.sh (exit {self.out.codes.get('evaluate')}) ==\n{verifier_log}\n"
        text += f"== verdict: {status} ==\n" + (f"{error}\n" if error else "")
        write_file(paths.result_text(name), text.encode())
        # the proxy writes the raw log at its first request; with none (the oracle) the log
        # is empty, so that the export and the validator still see and account for it
        exchanges = paths.rollout(name).exchanges
        if not exchanges.exists():
            write_file(exchanges, b"")

    def facts(self, status: RolloutStatus) -> PhaseFacts:
        out = self.out
        evaluated = out.reward is not None and status != "infra_error"
        return PhaseFacts(
            exit_codes=ExitCodes(
                setup=out.codes.get("setup"),
                agent=out.codes.get("agent"),
                evaluate=out.codes.get("evaluate"),
            ),
            timings=dict(out.timings),
            reward=out.reward if evaluated else None,
            rewards=out.rewards if evaluated else None,
        )


def _read(path: Path, limit: int = 1024 * 1024) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
