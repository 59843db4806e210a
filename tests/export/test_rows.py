"""The results row's one home: its fields, its reader, its version gate and its totals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from contagent.core import rows
from contagent.errors import ContagentError
from contagent.export.derive import build_row
from contagent.export.export_summary import ExportSummary
from contagent.export.exporter import ExportOptions, export
from contagent.layout import RolloutPaths, find_rollouts
from contagent.rawlog import read as rawlog
from contagent.rawlog import records
from contagent.rawlog import result as rollout_result
from contagent.versions import NewerVersionError, check_version
from tests.helpers import read_rows, write_rows


@pytest.fixture()
def exported(samples: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all", formats=()))
    return out


def test_the_derived_row_has_the_model_fields_in_order(samples: Path) -> None:
    for paths in find_rollouts([samples]):
        row = build_row(paths).row
        assert tuple(row) == rows.ROW_KEYS
        assert rows.row_problem(row) is None
        rows.ResultRow.model_validate(row, strict=True)


def test_read_results_numbers_lines_and_names_each_problem(exported: Path, tmp_path: Path) -> None:
    good = read_rows(exported / "results.jsonl")
    path = tmp_path / "results.jsonl"
    bad_type = {**good[0], "branches": "2"}
    missing = {k: v for k, v in good[1].items() if k != "steps"}
    newer = {**good[2], "schema_version": rows.SCHEMA_VERSION + 1}
    extra = {**good[3], "token_ids": {}}
    write_rows(path, [good[0], bad_type])
    with path.open("ab") as fh:
        fh.write(b"\n  \nnot json\n")
    with path.open("ab") as fh:
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in (missing, newer, extra)))
    lines = rows.read_results(path)
    assert [line.lineno for line in lines] == [1, 2, 5, 6, 7, 8]
    assert lines[0].row == good[0] and lines[0].problem is None
    assert lines[1].row is None and lines[1].problem.startswith("branches: ")
    assert lines[1].rollout_id == good[0]["rollout_id"]
    assert lines[2].problem.startswith("not JSON (") and lines[2].rollout_id is None
    assert lines[3].problem == "missing keys: steps"
    assert lines[4].newer and "is newer than this contagent reads" in lines[4].problem
    assert lines[5].problem.startswith("token_ids: ")
    data = path.read_bytes()
    start, end = lines[3].span
    assert orjson.loads(data[start:end]) == missing


def test_read_results_refuses_an_unreadable_file_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ContagentError, match="no such file"):
        rows.read_results(tmp_path / "results.jsonl")
    with pytest.raises(ContagentError, match="is a directory"):
        rows.read_results(tmp_path)


def test_one_gate_reads_every_version_up_to_the_current_one() -> None:
    assert check_version(1, 3) == 1 and check_version(3, 3) == 3
    with pytest.raises(NewerVersionError, match="schema_version 4 is newer"):
        check_version(4, 3, "f:1")
    for bad in (0, True, "1", None, 1.0):
        with pytest.raises(ContagentError, match="not a version number"):
            check_version(bad, 3)


def test_bumping_the_raw_log_version_keeps_older_logs_readable(
    samples: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = RolloutPaths(samples / "clean_pass")
    monkeypatch.setattr(rawlog, "SCHEMA_VERSION", records.SCHEMA_VERSION + 1)
    raw = rawlog.read_exchanges(paths.exchanges)
    assert raw.indices and not raw.problems
    # a record carries the lowest version that holds its fields (records.with_policy_version)
    data = re.sub(
        rb'"schema_version":\d+',
        f'"schema_version":{records.SCHEMA_VERSION + 2}'.encode(),
        paths.exchanges.read_bytes(),
        count=1,
    )
    with pytest.raises(NewerVersionError, match=":1: schema_version"):
        rawlog.parse_exchanges(paths.exchanges, data)


def test_the_models_take_their_version_from_the_one_constant() -> None:
    for model, current in (
        (records.RequestRecord, records.SCHEMA_VERSION),
        (records.OutcomeRecord, records.SCHEMA_VERSION),
        (rollout_result.RolloutResult, rollout_result.RESULT_SCHEMA_VERSION),
        (rows.ResultRow, rows.SCHEMA_VERSION),
    ):
        schema = model.model_json_schema()["properties"]["schema_version"]
        assert (schema["default"], schema["minimum"], schema["maximum"]) == (current, 1, current)


def test_summarize_gives_the_export_summary_its_totals(exported: Path) -> None:
    written = ExportSummary.model_validate_json((exported / "export-summary.json").read_bytes())
    again = rows.summarize(read_rows(exported / "results.jsonl"))
    shared = set(rows.RowSummary.model_fields)
    assert written.model_dump(include=shared) == again.model_dump()
    assert again.rollouts_read == len(again.raw_logs) > 0
    assert sum(g.rollouts for g in again.per_experiment.values()) == again.rollouts_read
    assert sum(again.steps_per_rollout.values()) == again.rollouts_read


def test_the_viewer_imports_no_later_stage() -> None:
    code = (
        "import sys, contagent.viewer.app, contagent.export.derive, contagent.core.rows;"
        "print(sorted(m for m in sys.modules if m.startswith(('contagent.export.', "
        "'contagent.validate', 'contagent.cli')) and not m.startswith(("
        "'contagent.export.derive', 'contagent.export.formats'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
