"""The agent interface: what ``contagent run`` needs to know of one agent.

An agent is one module implementing :class:`Agent`. The host side (this
package) never imports the agent itself: it says which image the agent runs
in, what command starts it headless in the runner container with which
settings, and how to read what it left in the container's ``/contagent/out``.
The generic in-container driver (``contagent/runner/lifecycle/agent_main.py``) runs the
phases (setup, agent, evaluate) the same way for every agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

#: Where the runner puts the rollout's files in the container.
IN_CONTAINER = "/contagent"
WORKSPACE = "/root/workspace"
OUT_DIR = f"{IN_CONTAINER}/out"
#: Where the agent's :attr:`Launch.files` are put.
AGENT_DIR = f"{IN_CONTAINER}/agent"
#: The agent's key: the real one stays with the proxy on the host.
DUMMY_KEY = "contagent-proxy"
#: In :attr:`Agent.honours`: the agent runs the task's own reference solution in place of a
#: model, so its rollouts show a task is solvable and are never training data.
SOLUTION = "solution"

#: The wire API an agent speaks: the name of its adapter in :data:`contagent.wire.TABLE`, or
#: ``none``: the agent talks to no LLM (the oracle), so a run of it alone checks no server.
Api = Literal["chat", "responses", "messages", "none"]


@dataclass(frozen=True)
class AgentSettings:
    """Everything an agent is given for one rollout (all agents get the same)."""

    task: str
    served_model_name: str
    #: the rollout's proxy route, ending in ``/v1``
    base_url: str
    num_retries: int
    timeout_s: float
    max_iterations: int
    reasoning_effort: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    #: skill folder names the experiment asks for, under ``skills_dir``
    skills: tuple[str, ...] = ()
    skills_dir: str = f"{IN_CONTAINER}/skills"
    workspace: str = WORKSPACE
    out_dir: str = OUT_DIR


@dataclass(frozen=True)
class Launch:
    """How the agent phase starts in the container."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    #: extra files for the container: (path under :data:`AGENT_DIR`, content, mode)
    files: list[tuple[str, bytes, int]] = field(default_factory=list)


@dataclass
class AgentReport:
    """What the agent left behind, read on the host after the container ended."""

    version: str | None = None
    stop_condition: str | None = None
    iterations: int | None = None
    skills_loaded: list[str] | None = None
    error: str | None = None
    #: the agent's event log as JSON objects, one per ``<name>.log`` line
    events: list[bytes] = field(default_factory=list)


def runs_solution(agent: Agent) -> bool:
    """Whether ``agent`` runs the task's reference solution in place of a model."""
    return SOLUTION in agent.honours


class Agent(Protocol):
    """One agent. Implementations are small, stateless module-level objects."""

    @property
    def name(self) -> str:
        """The name ``contagent run --agent`` takes."""
        ...

    @property
    def api(self) -> Api:
        """The wire API it speaks, named by its adapter (:data:`contagent.wire.TABLE`):
        ``chat``, ``responses`` or ``messages``; or ``none`` (the oracle)."""
        ...

    @property
    def image(self) -> str:
        """The image ``contagent build`` makes for it by default."""
        ...

    @property
    def dockerfile(self) -> str:
        """Its Dockerfile, relative to the repository's ``docker/`` folder."""
        ...

    @property
    def honours(self) -> frozenset[str]:
        """Settings it honours (``skills``, ``max_iterations``, ``temperature``, ...);
        the others are announced in one line at the start of a run. :data:`SOLUTION`:
        it runs the task's reference solution, not a model."""
        ...

    def model_string(self, served_model_name: str) -> str:
        """The model name as this agent must be given it (e.g. with a provider prefix)."""
        ...

    def launch(self, settings: AgentSettings) -> Launch:
        """The headless command, its environment and its configuration files."""
        ...

    def report(self, out_dir: Path) -> AgentReport:
        """Read the agent's results and event log from the collected ``out`` folder."""
        ...
