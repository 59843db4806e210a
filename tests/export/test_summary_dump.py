"""The export summary is written as pydantic would dump it, though made without validation."""

from __future__ import annotations

from pathlib import Path

import orjson

from contagent.core.rows import RowSummary
from contagent.export.export_summary import ExportSummary, TokenGroups
from contagent.export.exporter import export
from contagent.model_schema import plain_dump


def test_the_written_summary_is_pydantics_dump_of_it(samples: Path, tmp_path: Path) -> None:
    summary = export([samples], tmp_path / "out")
    summary.token_groups = TokenGroups.model_construct(groups=2, singletons=1, short=0)
    summary.count_left_out("trl", "unrenderable_tool")
    assert summary.per_model and summary.raw_logs  # nested models, lists and dicts filled
    assert plain_dump(summary) == summary.model_dump()
    written = orjson.loads((tmp_path / "out" / "export-summary.json").read_bytes())
    assert ExportSummary.model_validate(written).model_dump() == written


def test_summaries_made_without_validation_count_as_validated_ones() -> None:
    made, validated = RowSummary.model_construct(), RowSummary()
    row = {
        "raw_log": {"path": "/r/exchanges.jsonl"},
        "repairs": [],
        "training_ready": True,
        "passed": True,
        "excluded": [],
        "not_ready_kinds": [],
        "token_usage": {
            part: {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
            for part in ("billed", "selected", "excluded")
        },
        "model": "m",
    }
    for summary in (made, validated):
        summary.add(row, 4)
    assert plain_dump(made) == validated.model_dump() == plain_dump(validated)
    assert made.tokens.billed.total_tokens == 5
