"""``contagent validate``: re-check an export against the raw logs its rows point to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from contagent import rules
from contagent.errors import ContagentError
from contagent.layout import ExportPaths
from contagent.rawlog import read_exchanges, read_result
from contagent.validate.formats import check_format_folders
from contagent.validate.invariants import row_problems

_ROW_KEYS = ("rollout_id", "training_ready", "steps", "excluded", "token_usage", "raw_log", "tools")


class Violation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollout_id: str | None
    reason: str


class ValidationReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    results: str
    rows: int = 0
    training_ready: int = 0
    parquet_rows: int = 0
    violations: list[Violation] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def _read_rows(results: Path) -> list[dict[str, Any]]:
    try:
        data = results.read_bytes()
    except FileNotFoundError:
        raise ContagentError(f"{results}: no such file") from None
    except IsADirectoryError:
        raise ContagentError(f"{results}: is a directory, expected results.jsonl") from None
    rows = []
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ContagentError(f"{results}:{lineno}: malformed JSON ({exc})") from None
        if not isinstance(row, dict) or any(k not in row for k in _ROW_KEYS):
            raise ContagentError(f"{results}:{lineno}: not a contagent results row")
        rows.append(row)
    return rows


def validate(results: Path) -> ValidationReport:
    """Check every row of ``results`` against its raw log, then every format folder beside it."""
    results = Path(results)
    rows = _read_rows(results)
    report = ValidationReport(results=str(results), rows=len(rows))
    branch_tools: dict[str, dict[int, list[Any]]] = {}
    for row in rows:
        rid = row["rollout_id"]
        report.training_ready += bool(row["training_ready"])
        ref = row["raw_log"]
        try:
            raw = read_exchanges(Path(ref["path"]))
        except ContagentError as exc:
            report.violations.append(Violation(rollout_id=rid, reason=f"raw log unusable: {exc}"))
            continue
        if raw.sha256 != ref["sha256"] or raw.size != ref["bytes"]:
            report.violations.append(
                Violation(rollout_id=rid, reason="raw log changed since export (sha256 differs)")
            )
            continue
        try:
            result = read_result(raw.path.parent / "result.json") or {}
            problems = row_problems(row, raw, result)
        except ContagentError as exc:
            problems = [f"result.json unusable: {exc}"]
        except (KeyError, TypeError, AttributeError, IndexError) as exc:
            problems = [f"malformed row ({type(exc).__name__}: {exc})"]
        report.violations.extend(Violation(rollout_id=rid, reason=p) for p in problems)
        tools: dict[int, list[Any]] = {}
        for step in row["steps"]:
            body = raw.requests.get(step["exchange_index"], {}).get("body") or {}
            tools.setdefault(step["branch"], []).append(body.get("tools"))
        branch_tools[rid] = {b: rules.tool_union(t)[0] for b, t in tools.items()}
    report.parquet_rows, folder_problems = check_format_folders(
        ExportPaths.of_results(results), rows, branch_tools
    )
    report.violations.extend(Violation(rollout_id=r, reason=p) for r, p in folder_problems)
    return report
