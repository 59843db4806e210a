"""What one export did, as a typed record (the CLI prints it; the dataset card shows it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contagent.rows import TokenUsage


class ExportSummary(BaseModel):
    """Totals over one ``contagent export`` run."""

    model_config = ConfigDict(extra="forbid")

    contagent_version: str
    options: dict[str, Any] = Field(description="The export options as given.")
    out_dir: str
    rollouts_read: int = 0
    training_ready: int = 0
    passed: int = Field(0, description="Rollouts whose result says passed.")
    not_ready_reasons: dict[str, int] = Field(
        default_factory=dict,
        description="Rollouts not training-ready, per kind of reason (a rollout can count under several).",
    )
    exclusions: dict[str, int] = Field(
        default_factory=dict, description="Excluded exchanges by reason."
    )
    exchanges_read: int = 0
    steps_selected: int = 0
    repairs: int = 0
    branches_written: int = 0
    rollouts_written: int = Field(0, description="Rollouts with at least one Parquet row.")
    models: list[str] = Field(default_factory=list)
    experiments: list[str] = Field(default_factory=list)
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    raw_bytes: int = 0
    raw_logs: list[str] = Field(
        default_factory=list,
        description="The raw log of every rollout read, in results.jsonl order: the validator "
        "checks that each has exactly one row.",
    )
    results_path: str | None = None
    parquet_files: list[str] = Field(default_factory=list)

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.rollouts_read if self.rollouts_read else None
