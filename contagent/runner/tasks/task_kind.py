"""A task: one loaded folder of any kind ``contagent run --experiments-dir`` takes.

The kinds themselves (how a folder is recognised, loaded and run) are in
``contagent.runner.tasks.kinds``; the rollout plan and the run loop see only this.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from contagent.runner.tasks.experiment import ExperimentSpec


class Task(Protocol):
    """One loaded, checked task folder, whatever its kind: a frozen dataclass, so that a
    Ray node can point it at its own copy of the folder (``root``, ``skill_dirs``)."""

    @property
    def name(self) -> str:
        """The experiment name: rollout ids and log folders derive from it."""
        ...

    @property
    def kind(self) -> str:
        """The name of the :class:`TaskKind` that loaded it."""
        ...

    @property
    def root(self) -> Path: ...

    @property
    def skill_dirs(self) -> tuple[Path, ...]: ...

    @property
    def has_solution(self) -> bool:
        """Whether ``--agent oracle`` can run it (it carries a reference solution)."""
        ...

    @property
    def wants_internet(self) -> bool:
        """Whether it asks for a route out while the agent works."""
        ...

    @property
    def skills_wanted(self) -> tuple[str, ...]:
        """The skills it gives the agent, as a notice names them (an agent that does not
        honour skills runs without them, and the run says so in one line)."""
        ...

    @property
    def spec(self) -> ExperimentSpec:
        """The task text, skills and runner options as the seed format states them."""
        ...
