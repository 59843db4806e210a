"""Document formats: one JSON document per selected rollout, and an index of the folder.

``OUT/<name>/<rollout_id>.json`` holds a rollout's document and the index
(:class:`~contagent.layout.DocumentFolderPaths`) accounts for every row the export read: the documents written, and the rollouts left
out with why (not selected by ``--filter``, or a step the format cannot hold). The
exporter and the validator both decide a row's fate with :func:`outcome`.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from contagent.errors import ContagentError
from contagent.export.formats.rollout_data import RolloutData
from contagent.layout import DocumentFolderPaths


class DocumentFormat(Protocol):
    """A format written as one JSON document per selected rollout, plus an index."""

    name: str
    """The ``--format`` value and the folder's name."""
    document_version: str
    """The version the documents declare (their own format's, e.g. ``ATIF-v1.8``)."""
    rows_are: str
    """What a document is, in a few words (e.g. ``trajectories``)."""

    def left_out_reason(self, row: dict[str, Any], filter: str) -> str | None:
        """Why ``--filter`` keeps ``row`` out, or None when it is selected."""
        ...

    def document(self, row: dict[str, Any], data: RolloutData) -> dict[str, Any]:
        """The document of a selected row; :class:`ContagentError` when the format cannot
        hold it (the rollout is then left out with that reason)."""
        ...


class _IndexModel(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Written(_IndexModel):
    rollout_id: str
    file: str


class LeftOut(_IndexModel):
    rollout_id: str
    reason: str


class DocumentIndex(_IndexModel):
    """``_index.json``: what the export chose, wrote and left out, in results.jsonl order."""

    format: str
    records_version: int
    """The version of contagent's records (every format's), through the one version gate."""
    document_version: str
    filter: Literal["passed", "all"]
    formats: list[str]
    """Every format the export wrote, so that a folder missing beside this one is noticed."""
    written: list[Written]
    left_out: list[LeftOut]


def outcome(
    fmt: DocumentFormat, row: dict[str, Any], data: RolloutData, filter: str
) -> tuple[dict[str, Any] | None, str | None]:
    """(the row's document, None) or (None, why the row is left out)."""
    reason = fmt.left_out_reason(row, filter)
    if reason is not None:
        return None, reason
    try:
        DocumentFolderPaths.document_name(row["rollout_id"])
        return fmt.document(row, data), None
    except ContagentError as exc:
        return None, str(exc)
