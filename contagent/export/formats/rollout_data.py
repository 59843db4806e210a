"""What a format builds its records from besides the results row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contagent.rules.groups import GroupFacts
from contagent.rules.rendered_tools import TrainerTools
from contagent.rules.rl import TokenOptions
from contagent.rules.token_samples import TokenSamples


@dataclass(frozen=True)
class RolloutData:
    """Facts of one rollout's raw log a format needs and its results row does not hold."""

    branch_tools: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """Per branch, the union of its steps' tool definitions, as recorded."""
    trainer_tools: TrainerTools = field(default_factory=TrainerTools)
    """Per branch, the function tools the model saw (:func:`contagent.rules.trainer_tools`),
    or why they are not known."""
    tokens: TokenSamples | None = None
    """The token samples; None when the raw log holds no token data."""
    cached_tokens: dict[int, int] = field(default_factory=dict)
    """Per kept step (exchange index), the prompt tokens its usage says were cache hits."""
    agent: str | None = None
    """The agent that ran (``result.json``'s ``agent``), when known."""
    agent_version: str | None = None
    """That agent's version (``result.json``'s ``agent_version``), when known."""
    verdict: dict[str, Any] = field(default_factory=dict)
    """What the rollout's verdict (``result.json``) says of it as an attempt of its group."""
    group: GroupFacts | None = None
    """Its group and advantage, over every rollout of the export (set by the exporter and
    the validator, which see them all); None when not known."""
    token_options: TokenOptions = field(default_factory=TokenOptions)
    """The options that shape RL samples."""
