"""What one export did, as a typed record (the CLI prints it; the dataset card shows it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contagent.core.rows import RowSummary


class TokenGroups(BaseModel):
    """The groups the tokens format's samples came from."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    groups: int = 0
    singletons: int = Field(0, description="Groups of one attempt: their advantage is 0.")
    short: int = Field(
        0, description="Groups a rollout left (it ended in infra_error, or has no reward)."
    )


class ExportSummary(RowSummary):
    """Totals over one ``contagent export`` run: the rows' totals
    (:class:`~contagent.core.rows.RowSummary`) and what only the export knows."""

    contagent_version: str
    options: dict[str, Any] = Field(description="The export options as given.")
    out_dir: str
    exchanges_read: int = 0
    branches_written: int = Field(0, description="Rows of each SFT format (one per branch).")
    rollouts_written: int = Field(
        0, description="Rollouts with at least one Parquet row or document."
    )
    format_rows: dict[str, int] = Field(
        default_factory=dict,
        description="Parquet rows written, per format (documents, per document format).",
    )
    format_rollouts: dict[str, int] = Field(
        default_factory=dict,
        description="Rollouts with at least one row (or a document) in that format's folder.",
    )
    raw_bytes: int = 0
    results_path: str | None = None
    parquet_files: list[str] = Field(default_factory=list)
    document_files: dict[str, list[str]] = Field(
        default_factory=dict, description="Per document format, the documents written."
    )
    left_out: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="Per format, per kind, the selected rollouts that format left out "
        "(unrenderable_tool: the tools the model saw are not known).",
    )

    token_groups: TokenGroups | None = Field(
        None, description="The tokens format's groups (null when it was not written)."
    )

    def count_left_out(self, fmt: str, kind: str) -> None:
        kinds = self.left_out.setdefault(fmt, {})
        kinds[kind] = kinds.get(kind, 0) + 1
