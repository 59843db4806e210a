"""``contagent validate``: re-check an export against the raw logs its rows point to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from contagent import rules
from contagent.chat import sum_usage
from contagent.errors import ContagentError
from contagent.exporters.prime_sft_schema import PRIME_SFT_SCHEMA
from contagent.rawlog import read_exchanges, read_result
from contagent.trajectory import branch_conversations
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
    """Check every row of ``results`` against its raw log, then the Parquet beside it."""
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
    _check_parquet(results.parent, rows, branch_tools, report)
    return report


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
        if r["training_ready"]
        and (options.get("filter", "all") == "all" or r.get("passed") is True)
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
                convos[rid] = branch_conversations(row["steps"], row["drop_reasoning"])
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
