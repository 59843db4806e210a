"""The oracle: a task's own ``solution/solve.sh`` in place of an agent, with no LLM.

It shows a task is solvable and its tests are right before any model time is
spent. Only task kinds that carry a solution (Harbor tasks) can run it; the
solution is copied in for it alone. Its rollouts are never training-ready.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contagent.agents._util import jsonl_objects
from contagent.agents.base import SOLUTION, AgentReport, AgentSettings, Api, Launch
from contagent.agents.layer import AgentLayer

#: Where the task's ``solution/`` folder is put (as Harbor puts it).
SOLUTION_DIR = "/solution"


@dataclass(frozen=True)
class Oracle:
    name: str = "oracle"
    api: Api = "none"
    #: no runner image: the solution runs with what the task image has
    image: str = ""
    dockerfile: str = ""
    #: SOLUTION: the task's solution folder is copied in for it, and it is no model
    honours: frozenset[str] = frozenset({SOLUTION, "max_iterations"})

    def model_string(self, served_model_name: str) -> str:
        return served_model_name

    def launch(self, settings: AgentSettings) -> Launch:
        # the runner makes it executable, as root, for the agent phase's user
        return Launch(argv=[f"{SOLUTION_DIR}/solve.sh"])

    def report(self, out_dir: Path) -> AgentReport:
        # solve.sh's output is text, kept in the log one line a record
        return AgentReport(
            stop_condition="finished", iterations=0, events=jsonl_objects(out_dir / "agent.stdout")
        )


AGENT = Oracle()
#: nothing to add to the task image
LAYER = AgentLayer(collect="true")
