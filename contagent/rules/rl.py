"""Which rollouts give RL samples, and under which options (pure functions, no IO).

Every not-ready kind is classified once, in :data:`NOT_READY_CLASS`:

- ``model``: the model's own behaviour (a tool that does not exist, arguments that are
  not JSON, a cut answer the agent went on with). RL learns from exactly these, so the
  rollout still gives samples, and they carry the kind.
- ``record``: the record is unsound or is no model's attempt (an ambiguous call
  identity, a missing outcome, an unreadable request, the oracle). No samples.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import orjson

from contagent.rules.groups import ADVANTAGE_METHODS, GROUP_PARTS, AdvantageMethod

KindClass = Literal["model", "record"]

#: Each not-ready kind: the model's behaviour (samples carry it) or an unsound record (none).
NOT_READY_CLASS: dict[str, KindClass] = {  # every NotReadyKind (a test holds them equal)
    "bad_tool_arguments": "model",
    "unknown_tool": "model",
    "tool_protocol": "model",
    "consumed_incomplete": "model",
    "reasoning_conflict": "model",
    "truncated": "model",
    "index_gap": "record",
    "no_outcome": "record",
    "no_request": "record",
    "duplicate_record": "record",
    "torn_line": "record",
    "corrupt_log": "record",
    "missing_usage": "record",
    "unanswered_tool_call": "record",
    "partial_execution": "record",
    "ambiguous_call_id": "record",
    "non_text_content": "record",
    "legacy_function_call": "record",
    "unreadable_request": "record",
    "tool_conflict": "record",
    "no_steps": "record",
    "responses_chain": "record",
    "unsupported_item": "record",
    "translation_mismatch": "record",
    "oracle": "record",
}

#: Why the tokens format leaves a selected rollout out (the export's summary counts them).
RlLeftOut = Literal["no_reward", "infra_error", "raw_logprobs", "unknown_logprobs_mode"]

TOKENS_OPTIONS_KEY = b"contagent.tokens"
"""Parquet metadata key of the tokens folder: its :class:`TokenOptions` as JSON."""


@dataclass(frozen=True)
class TokenOptions:
    """The export options that shape RL samples (stamped into the tokens shards)."""

    advantage: AdvantageMethod = "grpo"
    group_by: tuple[str, ...] = ()
    allow_raw_logprobs: bool = False
    train_constrained: bool = False

    def stamp(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def read(cls, raw: bytes | None) -> TokenOptions | None:
        """The options a shard records; None when it records none or they do not read."""
        try:
            value = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            return None
        if not isinstance(value, dict) or set(value) != set(asdict(cls())):
            return None
        group_by = value["group_by"]
        if (
            value["advantage"] not in ADVANTAGE_METHODS
            or not isinstance(group_by, list)
            or not set(group_by) <= set(GROUP_PARTS)
            or not all(
                isinstance(value[k], bool) for k in ("allow_raw_logprobs", "train_constrained")
            )
        ):
            return None
        return cls(
            value["advantage"],
            tuple(group_by),
            value["allow_raw_logprobs"],
            value["train_constrained"],
        )


def model_kinds(row: dict[str, Any]) -> list[str] | None:
    """The row's not-ready kinds when every one is the model's behaviour; None when any is
    an unsound record (the rollout then gives no RL samples)."""
    kinds = list(row["not_ready_kinds"])
    if all(NOT_READY_CLASS.get(k) == "model" for k in kinds):
        return kinds
    return None


def rl_left_out(row: dict[str, Any], options: TokenOptions) -> RlLeftOut | None:
    """Why a rollout whose steps give samples still gives none under ``options``."""
    status, reward = row.get("status"), row.get("reward")
    if status == "infra_error":
        return "infra_error"
    if (
        not isinstance(reward, (int, float))
        or isinstance(reward, bool)
        or not math.isfinite(reward)
    ):
        return "no_reward"
    if options.allow_raw_logprobs:
        return None
    steps = (row.get("tokens") or {}).get("sampling") or []
    if any(s["modified"] and s["logprobs_mode"] == "raw_logprobs" for s in steps):
        return "raw_logprobs"
    if any(s["modified"] and s["logprobs_mode"] is None for s in steps):
        return "unknown_logprobs_mode"
    return None
