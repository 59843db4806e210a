"""Groups of attempts and their advantages, for RL samples (pure functions, no IO).

A *group* is the attempts at one task with one model: the rollouts of one experiment or
Harbor task across ``--repeat``, as each rollout's ``result.json`` names them (never its
folder name: ``a`` and ``a_r1`` are one group). A rollout recorded by the proxy alone is
grouped by the ``group`` its reward post named. ``--group-by agent`` adds the agent.

The advantage is prime-rl's GRPO by default: the rollout's reward minus the mean reward
of its group's attempts that have one, whichever rollouts ``--filter`` keeps. A rollout
that ended in ``infra_error`` is no attempt of the model: it leaves its group, and the
group is then short (``group_complete`` false). So is a group with an attempt that has no
reward. A group of one gets advantage 0 (there is nothing to compare with).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import orjson

#: How the advantage is computed from the group's rewards (``--advantage``).
AdvantageMethod = Literal["grpo", "grpo-std", "none"]
ADVANTAGE_METHODS: tuple[str, ...] = get_args(AdvantageMethod)

#: What ``--group-by`` can add to the group key.
GroupPart = Literal["agent"]
GROUP_PARTS: tuple[str, ...] = get_args(GroupPart)


#: The verdict's fields an attempt is read from (``result.json``'s, or a posted reward's).
ATTEMPT_FIELDS = ("experiment", "model", "agent", "group", "reward", "status")


@dataclass(frozen=True)
class Attempt:
    """What a rollout's verdict says of it as an attempt of its group."""

    rollout_id: str
    key: tuple[str | None, ...]
    reward: float | None
    infra_error: bool

    @property
    def counts(self) -> bool:
        """Does this attempt take part in its group's mean (a reward, no infra error)?"""
        return self.reward is not None and not self.infra_error


@dataclass(frozen=True)
class GroupFacts:
    """A rollout's group, as its samples carry it."""

    group_id: str
    group_size: int
    """The group's attempts that count: with a reward, not ended in ``infra_error``."""
    group_complete: bool
    """Every rollout of the group counts (none left it)."""
    advantage: float
    """The rollout's advantage (0 for a group of one, under ``none``, or with no reward)."""


def _reward(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def attempt_of(
    rollout_id: str, verdict: Mapping[str, Any], group_by: Iterable[str] = ()
) -> Attempt:
    """The attempt a rollout is, from its verdict (``result.json``'s fields, or the reward
    posted for a rollout the proxy recorded alone: ``reward``, ``group``)."""
    task, model, posted = verdict.get("experiment"), verdict.get("model"), verdict.get("group")
    key: tuple[str | None, ...]
    if isinstance(task, str):
        key = ("task", task, model if isinstance(model, str) else None)
    elif isinstance(posted, str):
        key = ("group", posted)
    else:
        key = ("rollout", rollout_id)  # nothing names its group: a group of its own
    if "agent" in group_by:
        agent = verdict.get("agent")
        key = (*key, agent if isinstance(agent, str) else None)
    return Attempt(
        rollout_id, key, _reward(verdict.get("reward")), verdict.get("status") == "infra_error"
    )


def group_id(key: tuple[str | None, ...]) -> str:
    """The group's name in the samples: its key as a JSON list (unambiguous, readable)."""
    return orjson.dumps(list(key[1:])).decode()


def _advantages(rewards: list[float], method: AdvantageMethod) -> list[float]:
    if method == "none" or len(rewards) < 2:
        return [0.0] * len(rewards)
    mean = math.fsum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    if method == "grpo":
        return centred
    std = math.sqrt(math.fsum(c * c for c in centred) / len(centred))
    return [c / std if std > 0 else 0.0 for c in centred]


def group_table(attempts: Iterable[Attempt], method: AdvantageMethod) -> dict[str, GroupFacts]:
    """Per rollout id, its group and advantage."""
    groups: dict[tuple[str | None, ...], list[Attempt]] = {}
    for attempt in attempts:
        groups.setdefault(attempt.key, []).append(attempt)
    table: dict[str, GroupFacts] = {}
    for key, members in groups.items():
        counted = [a for a in members if a.counts]
        values = _advantages([a.reward for a in counted if a.reward is not None], method)
        advantage = {a.rollout_id: v for a, v in zip(counted, values, strict=True)}
        name = group_id(key)
        complete = len(counted) == len(members)
        for a in members:
            table[a.rollout_id] = GroupFacts(
                name, len(counted), complete, advantage.get(a.rollout_id, 0.0)
            )
    return table


@dataclass(frozen=True)
class AttemptGroupCounts:
    """What the summary says of the groups the samples came from."""

    groups: int
    singletons: int
    """Groups of one attempt that counts: their samples have advantage 0."""
    short: int
    """Groups a rollout left (``infra_error``, or no reward)."""


def group_counts(table: Mapping[str, GroupFacts], rollout_ids: Iterable[str]) -> AttemptGroupCounts:
    """The groups of ``rollout_ids`` (the rollouts that gave samples)."""
    seen = {table[r].group_id: table[r] for r in rollout_ids if r in table}
    return AttemptGroupCounts(
        len(seen),
        sum(1 for g in seen.values() if g.group_size == 1),
        sum(1 for g in seen.values() if not g.group_complete),
    )
