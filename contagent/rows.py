"""One ``results.jsonl`` row per rollout: the typed contract between exporter and validator.

Steps store what each request *adds* to the conversation (``messages``,
relative to the step it ``extends``), so a row stays a small fraction of the
raw log even though every raw request resends the whole history.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contagent.chat import USAGE_FIELDS
from contagent.rules import ExcludedReason, NotReadyKind


class TokenCounts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def add(self, usage: dict[str, Any] | None) -> None:
        if usage is None:
            return
        for field in USAGE_FIELDS:
            value = usage.get(field)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, field, getattr(self, field) + value)


class TokenUsage(BaseModel):
    """Rule 8: ``selected + excluded == billed``, per field."""

    model_config = ConfigDict(extra="forbid")

    billed: TokenCounts = Field(default_factory=TokenCounts)
    selected: TokenCounts = Field(default_factory=TokenCounts)
    excluded: TokenCounts = Field(default_factory=TokenCounts)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Step(_Strict):
    exchange_index: int = Field(ge=0, description="Index of the raw exchange this step is.")
    branch: int = Field(ge=0, description="Conversation branch (0-based) the step belongs to.")
    extends: int | None = Field(
        description="exchange_index of the previous step of the branch, or null for a branch's "
        "first step. The request's messages are that step's request messages + `messages`."
    )
    messages: list[Any] = Field(
        description="Request messages this step adds (after fragment repair), as sent."
    )
    response: dict[str, Any] = Field(
        description="The assistant message the server returned (reasoning policy applied)."
    )
    finish_reason: str | None
    consumed: bool = Field(description="A later request carries this response.")
    truncated: bool = Field(description="This step's own response was cut (rule 7).")
    usage: dict[str, int] | None = Field(description="Usage of this exchange.")


class Excluded(_Strict):
    exchange_index: int = Field(ge=0)
    reason: ExcludedReason
    duplicate_of: int | None = Field(
        None, description="For duplicate_retry: the exchange kept in its place."
    )
    detail: str | None = None
    usage: dict[str, int] | None = None


class Repair(_Strict):
    kind: Literal["merged_tool_fragments"] = "merged_tool_fragments"
    tool_call_id: str | None
    fragments: int = Field(ge=2, description="How many adjacent tool messages were merged.")
    first_exchange_index: int = Field(description="First request in which the repair was made.")


class RawLogRef(_Strict):
    path: str = Field(description="Absolute path of the raw exchange log.")
    sha256: str
    bytes: int


class ResultRow(_Strict):
    schema_version: Literal[1] = 1
    rollout_id: str
    experiment: str | None = None
    model: str | None = None
    status: str | None = Field(None, description="Runner verdict from result.json, if any.")
    passed: bool | None = None
    reward: float | None = None
    stop_condition: str | None = None
    started: float | None = None
    ended: float | None = None
    duration_s: float | None = None
    training_ready: bool
    training_ready_reason: str | None = Field(
        description="Why the rollout is not training-ready (null when it is)."
    )
    not_ready_kinds: list[NotReadyKind] = Field(
        description="The kinds of reason behind training_ready_reason, sorted; empty when ready."
    )
    truncated: bool = Field(description="Rule 7: iteration limit, timeout or a cut last step.")
    truncation_reason: str | None = None
    steps: list[Step]
    excluded: list[Excluded]
    tools: list[dict[str, Any]] = Field(description="Union of the steps' tool definitions.")
    token_usage: TokenUsage
    repairs: list[Repair]
    branches: int = Field(ge=0)
    drop_reasoning: bool = Field(description="Export option: reasoning_content left out.")
    raw_log: RawLogRef
