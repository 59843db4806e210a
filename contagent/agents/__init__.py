"""The agents ``contagent run`` can run: one module each, behind :class:`Agent`.

To add one, write ``contagent/agents/<name>.py`` with an object implementing
:class:`~contagent.agents.base.Agent` (its image, its headless command and
settings, how to read its log), a Dockerfile under ``docker/`` for its image,
and add it to :data:`AGENTS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contagent.agents import claude_code, codex, mini_swe_agent, openhands, oracle
from contagent.agents.base import Agent, AgentReport, AgentSettings, Launch
from contagent.agents.layer import AgentLayer
from contagent.errors import ContagentError

AGENTS: dict[str, Agent] = {
    a.name: a
    for a in (openhands.AGENT, mini_swe_agent.AGENT, codex.AGENT, claude_code.AGENT, oracle.AGENT)
}
#: How each agent is layered onto a task's own image (Harbor tasks); absent: it cannot be.
LAYERS: dict[str, AgentLayer] = {
    openhands.AGENT.name: openhands.LAYER,
    mini_swe_agent.AGENT.name: mini_swe_agent.LAYER,
    codex.AGENT.name: codex.LAYER,
    claude_code.AGENT.name: claude_code.LAYER,
    oracle.AGENT.name: oracle.LAYER,
}
DEFAULT_AGENT = "openhands"


__all__ = [
    "AGENTS",
    "DEFAULT_AGENT",
    "LAYERS",
    "Agent",
    "AgentReport",
    "AgentSettings",
    "Launch",
    "get_agent",
    "unhonoured",
]


def get_agent(name: str) -> Agent:
    try:
        return AGENTS[name]
    except KeyError:
        raise ContagentError(
            f"--agent {name!r} is not a known agent (known: {', '.join(sorted(AGENTS))})"
        ) from None


def unhonoured(agent: Agent, skills: tuple[str, ...], requested: Mapping[str, Any]) -> str | None:
    """One line naming what ``agent`` cannot honour, or None.

    ``requested``: run settings by AgentSettings field name (``max_iterations``,
    ``temperature``, ...); unset ones (None, empty) are not requested.
    """
    missing = []
    if skills and "skills" not in agent.honours:
        missing.append(f"skills ({', '.join(skills)})")
    for key, value in requested.items():
        if value not in (None, {}) and key not in agent.honours:
            missing.append(f"--{key.replace('_', '-')}")
    if not missing:
        return None
    return f"{agent.name} cannot honour {', '.join(missing)}: it runs without them"
