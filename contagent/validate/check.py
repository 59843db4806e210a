"""``contagent validate``: re-check an export against the raw logs its rows point to."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from contagent import rules
from contagent.chat import sum_usage
from contagent.derive import ROW_SCHEMA_VERSION
from contagent.errors import ContagentError
from contagent.exporters.prime_sft_schema import PRIME_SFT_SCHEMA
from contagent.rawlog import read_exchanges, read_result
from contagent.trajectory import branch_conversations
from contagent.validate.invariants import row_problems
from contagent.validate.rowcheck import derived_problems, shape_problem

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
    violations: list[Violation] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def _read_rows(results: Path, report: ValidationReport) -> list[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank line; unparseable lines are violations."""
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
            rows.append((lineno, orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            report.violations.append(
                Violation(rollout_id=None, reason=f"row at line {lineno}: malformed JSON ({exc})")
            )
    return rows


def validate(results: Path) -> ValidationReport:
    """Check every row of ``results`` against its raw log, the set of rows against the
    export's summary, then the Parquet beside it.

    Raises :class:`ContagentError` for unusable input, with exit code
    :data:`INTERNAL_ERROR_EXIT` when the validator itself fails.
    """
    try:
        return _validate(Path(results))
    except ContagentError:
        raise
    except Exception as exc:  # a bug here must not read as "violations" (exit 1)
        raise ContagentError(
            f"internal error while validating {results}: {type(exc).__name__}: {exc}",
            exit_code=INTERNAL_ERROR_EXIT,
        ) from exc


def _validate(results: Path) -> ValidationReport:
    report = ValidationReport(results=str(results))
    parsed = _read_rows(results, report)
    report.rows = len(parsed)
    summary = _summary(results.parent)
    rows: list[dict[str, Any]] = []
    branch_tools: dict[str, dict[int, list[Any]]] = {}
    for lineno, row in parsed:
        shape = shape_problem(row)
        if shape is not None:
            rid = row.get("rollout_id") if isinstance(row, dict) else None
            report.violations.append(
                Violation(
                    rollout_id=rid if isinstance(rid, str) else None,
                    reason=f"row at line {lineno} is malformed: {shape}",
                )
            )
            continue
        if row["schema_version"] > ROW_SCHEMA_VERSION:
            raise ContagentError(
                f"{results}:{lineno}: schema_version {row['schema_version']} is newer than "
                f"this contagent reads ({ROW_SCHEMA_VERSION}); upgrade contagent"
            )
        rows.append(row)
        rid = str(row["rollout_id"])
        report.training_ready += row["training_ready"] is True
        tools = _check_row(row, lineno, summary, report)
        if tools is not None:
            branch_tools[rid] = tools
    report.violations.extend(_set_problems(rows, summary))
    _check_parquet(results.parent, rows, branch_tools, report)
    return report


def _summary(out_dir: Path) -> dict[str, Any] | None:
    path = out_dir / "export-summary.json"
    try:
        value = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ContagentError(f"{path}: unreadable ({exc})") from None
    return value if isinstance(value, dict) else None


def _check_row(
    row: dict[str, Any], lineno: int, summary: dict[str, Any] | None, report: ValidationReport
) -> dict[int, list[Any]] | None:
    """The row against its raw log; returns its branches' tool unions, None when unusable."""
    rid = str(row["rollout_id"])

    def violate(reason: str) -> None:
        report.violations.append(Violation(rollout_id=rid, reason=reason))

    ref = row["raw_log"]
    try:
        raw = read_exchanges(Path(ref["path"]))
    except ContagentError as exc:
        violate(f"raw log unusable: {exc}")
        return None
    if raw.sha256 != ref["sha256"] or raw.size != ref.get("bytes"):
        violate("raw log changed since export (sha256 differs)")
        return None
    if ref["path"] != str(raw.path.resolve()):
        violate(f"raw_log.path {ref['path']!r} is not an absolute resolved path")
    options = (summary or {}).get("options")
    if isinstance(options, dict) and options.get("drop_reasoning") != row["drop_reasoning"]:
        violate(f"drop_reasoning is {row['drop_reasoning']}, the export used the other setting")
    try:
        result = read_result(raw.path.parent / "result.json") or {}
    except ContagentError as exc:
        violate(f"result.json unusable: {exc}")
        return None
    problems = derived_problems(row, raw, result, raw.path.parent.name)
    try:
        problems += row_problems(row, raw, result)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        problems.append(f"row at line {lineno} is malformed ({type(exc).__name__}: {exc})")
    for problem in dict.fromkeys(problems):
        violate(problem)
    tools: dict[int, list[Any]] = {}
    for step in row["steps"]:
        body = raw.requests.get(step.get("exchange_index"), {}).get("body")
        tools.setdefault(step.get("branch"), []).append(
            body.get("tools") if isinstance(body, dict) else None
        )
    return {b: rules.tool_union(t)[0] for b, t in tools.items()}


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


def _check_parquet(
    out_dir: Path,
    rows: list[dict[str, Any]],
    branch_tools: dict[str, dict[int, list[Any]]],
    report: ValidationReport,
) -> None:
    import pyarrow.parquet as pq

    files = sorted((out_dir / "prime-sft" / "data").glob("*.parquet"))
    if not files:
        return
    summary_path = out_dir / "export-summary.json"
    options = (
        orjson.loads(summary_path.read_bytes()).get("options", {}) if summary_path.exists() else {}
    )
    wanted = {
        r["rollout_id"]: r
        for r in rows
        if rules.selected_for_training(r, options.get("filter", "all"))
    }
    found: dict[str, set[int]] = {}
    convos: dict[str, list[list[dict[str, Any]]]] = {}
    for path in files:
        table = pq.read_table(path)
        if not table.schema.equals(PRIME_SFT_SCHEMA, check_metadata=False):
            report.violations.append(
                Violation(rollout_id=None, reason=f"{path.name}: wrong schema")
            )
            continue
        for rec in table.to_pylist():
            report.parquet_rows += 1
            rid, branch = rec["rollout_id"], rec["branch"]
            row = wanted.get(rid)
            if row is None:
                report.violations.append(
                    Violation(
                        rollout_id=rid, reason="Parquet row for a rollout that is not selected"
                    )
                )
                continue
            if branch in found.setdefault(rid, set()):
                report.violations.append(Violation(rollout_id=rid, reason=f"branch {branch} twice"))
            found[rid].add(branch)
            if rid not in convos:
                try:
                    convos[rid] = branch_conversations(row["steps"], row["drop_reasoning"])
                except (KeyError, TypeError, AttributeError, IndexError, ValueError):
                    convos[rid] = []  # the row's own violations say why its steps do not chain
            if branch >= len(convos[rid]) or rec["messages"] != convos[rid][branch]:
                report.violations.append(
                    Violation(
                        rollout_id=rid, reason=f"Parquet branch {branch} differs from the row"
                    )
                )
            for column in _scalar_problems(rec, row):
                report.violations.append(
                    Violation(
                        rollout_id=rid,
                        reason=f"Parquet branch {branch}: {column} disagrees with the row",
                    )
                )
            if orjson.loads(rec["tools"]) != branch_tools.get(rid, {}).get(branch, []):
                report.violations.append(
                    Violation(rollout_id=rid, reason=f"Parquet branch {branch} has the wrong tools")
                )
            for call_args in _arguments(rec["messages"]):
                try:
                    orjson.loads(call_args)
                except (orjson.JSONDecodeError, TypeError):
                    report.violations.append(
                        Violation(rollout_id=rid, reason="tool-call arguments do not parse")
                    )
    for rid, row in wanted.items():
        if len(found.get(rid, ())) != row["branches"]:
            report.violations.append(
                Violation(rollout_id=rid, reason="Parquet lacks branches of a training-ready row")
            )


def _scalar_problems(rec: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """The filter columns of one Parquet record that do not follow from its row and messages."""
    usage = sum_usage(s["usage"] for s in row["steps"] if s["branch"] == rec["branch"])
    expected = {
        **{name: row.get(name) for name in ("experiment", "model", "reward", "passed")},
        "num_turns": sum(1 for m in rec["messages"] if m.get("role") == "assistant"),
        "num_messages": len(rec["messages"]),
        **usage,
    }
    return [name for name, value in expected.items() if rec.get(name) != value]


def _arguments(messages: list[dict[str, Any]]) -> list[Any]:
    return [c["function"]["arguments"] for m in messages for c in (m.get("tool_calls") or [])]
