"""``contagent validate``: re-check an export against the raw logs its rows point to."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from contagent import rules
from contagent.core.rows import read_results
from contagent.errors import ContagentError
from contagent.export.derive import read_verdict, rollout_data
from contagent.export.formats.rollout_data import RolloutData
from contagent.layout import ExportPaths, RolloutPaths
from contagent.rawlog.read import MAX_RAW_LOG_BYTES, RawRollout, read_exchanges
from contagent.rules import token_samples as token_rules
from contagent.validate.formats import check_format_folders
from contagent.validate.invariants import row_problems
from contagent.validate.rowcheck import derived_problems

#: Exit code of ``contagent validate`` when the validator itself fails (1 means violations).
INTERNAL_ERROR_EXIT = 4


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
    documents: int = Field(0, description="Documents read from the document format folders.")
    violations: list[Violation] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def validate(results: Path, max_raw_log: int = MAX_RAW_LOG_BYTES) -> ValidationReport:
    """Check every row of ``results`` against its raw log, the set of rows against the
    export's summary, then the Parquet beside it.

    A row's raw log is read in whichever form is on disk (compacted or not); one
    holding more than ``max_raw_log`` plain bytes is a violation of that row.

    Raises :class:`ContagentError` for unusable input, with exit code
    :data:`INTERNAL_ERROR_EXIT` when the validator itself fails.
    """
    try:
        return _validate(Path(results), max_raw_log)
    except ContagentError:
        raise
    except Exception as exc:  # a bug here must not read as "violations" (exit 1)
        raise ContagentError(
            f"internal error while validating {results}: {type(exc).__name__}: {exc}",
            exit_code=INTERNAL_ERROR_EXIT,
        ) from exc


def _validate(results: Path, max_raw_log: int) -> ValidationReport:
    report = ValidationReport(results=str(results))
    lines = read_results(results)
    report.rows = len(lines)
    newer = next((line for line in lines if line.newer), None)
    if newer is not None:
        raise ContagentError(f"{results}:{newer.lineno}: {newer.problem}")
    summary = _summary(ExportPaths.of_results(results))
    rows: list[dict[str, Any]] = []
    data: dict[str, RolloutData] = {}
    for line in lines:
        row = line.row
        if row is None:
            reason = f"row at line {line.lineno} is malformed: {line.problem}"
            report.violations.append(Violation(rollout_id=line.rollout_id, reason=reason))
            continue
        rows.append(row)
        report.training_ready += row["training_ready"] is True
        found = _check_row(row, line.lineno, summary, report, max_raw_log)
        if found is not None:
            data[row["rollout_id"]] = found
    report.violations.extend(_set_problems(rows, summary))
    report.parquet_rows, report.documents, folder_problems = check_format_folders(
        ExportPaths.of_results(results), rows, data, summary
    )
    report.violations.extend(Violation(rollout_id=r, reason=p) for r, p in folder_problems)
    return report


def _summary(paths: ExportPaths) -> dict[str, Any] | None:
    path = paths.summary
    try:
        value = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ContagentError(f"{path}: unreadable ({exc})") from None
    return value if isinstance(value, dict) else None


def _check_row(
    row: dict[str, Any],
    lineno: int,
    summary: dict[str, Any] | None,
    report: ValidationReport,
    max_raw_log: int,
) -> RolloutData | None:
    """The row against its raw log; returns what its formats' records are rebuilt from
    (tool unions, token samples, cached tokens, the agent), None when the raw log is unusable."""
    rid = str(row["rollout_id"])

    def violate(reason: str) -> None:
        report.violations.append(Violation(rollout_id=rid, reason=reason))

    ref = row["raw_log"]
    named = Path(ref["path"])
    rollout = RolloutPaths.of_raw_log(named)  # compacted since the export, or not
    try:
        raw = read_exchanges(rollout.raw_log if rollout else named, max_raw_log)
    except ContagentError as exc:
        violate(f"raw log unusable: {exc}")
        return None
    if raw.sha256 != ref["sha256"] or raw.size != ref.get("bytes"):
        violate("raw log changed since export (sha256 differs)")
        return None
    if ref["path"] != str(named.resolve()):
        violate(f"raw_log.path {ref['path']!r} is not an absolute resolved path")
    options = (summary or {}).get("options")
    if isinstance(options, dict) and options.get("drop_reasoning") != row["drop_reasoning"]:
        violate(f"drop_reasoning is {row['drop_reasoning']}, the export used the other setting")
    try:
        result = read_verdict(RolloutPaths(raw.path.parent))
    except ContagentError as exc:
        violate(f"result.json or reward.json unusable: {exc}")
        return None
    problems = derived_problems(row, raw, result, raw.path.parent.name)
    try:
        problems += row_problems(row, raw, result)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        problems.append(f"row at line {lineno} is malformed ({type(exc).__name__}: {exc})")
    for problem in dict.fromkeys(problems):
        violate(problem)
    tools = rules.branch_tools(
        (step["branch"], raw.requests.get(step["exchange_index"], {}).get("body"))
        for step in row["steps"]
    )
    return rollout_data(raw, result, row["steps"], tools, _token_plan(row, raw))


def _token_plan(row: dict[str, Any], raw: RawRollout) -> token_rules.TokenSamples | None:
    """The token samples rebuilt from the raw log, for the row's steps (checked above)."""
    if not token_rules.has_token_data(raw.outcomes):
        return None
    try:
        return token_rules.plan(
            row["steps"],
            row["branches"],
            raw.requests,
            raw.outcomes,
            {i: raw.usage(i) for i in raw.indices},
        )
    except (KeyError, TypeError, IndexError, ValueError):
        return None  # the row's steps are not the raw log's; derived_problems says so


def _set_problems(rows: list[dict[str, Any]], summary: dict[str, Any] | None) -> list[Violation]:
    """Exactly one row per rollout the export read."""
    out = []
    ids = Counter(str(r["rollout_id"]) for r in rows)
    out += [
        Violation(rollout_id=i, reason=f"{n} rows for one rollout") for i, n in ids.items() if n > 1
    ]
    logs = Counter(r["raw_log"]["path"] for r in rows)
    out += [
        Violation(rollout_id=None, reason=f"{n} rows for the raw log {p}")
        for p, n in logs.items()
        if n > 1
    ]
    read = (summary or {}).get("raw_logs")
    if isinstance(read, list):
        for path in sorted(set(read) - logs.keys()):
            out.append(Violation(rollout_id=None, reason=f"no row for the rollout read at {path}"))
        for path in sorted(logs.keys() - set(read)):
            out.append(Violation(rollout_id=None, reason=f"row for a rollout not read: {path}"))
    return out
