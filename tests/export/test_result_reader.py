"""``result.json``'s readers: the export's fast dict reader and the runner's model reader both
go through the version gate, and the types the export checks come from the model."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contagent.core.rows import FROM_RESULT, RESULT_FIELDS, ResultRow
from contagent.errors import ContagentError
from contagent.export.derive import RESULT_READ, read_result
from contagent.rawlog.result import RESULT_SCHEMA_VERSION, RolloutResult, field_types, load_result
from contagent.versions import NewerVersionError
from tests.strategies import json_values


def test_the_row_takes_from_result_json_only_fields_it_has():
    assert set(FROM_RESULT) <= set(RolloutResult.model_fields) & set(ResultRow.model_fields)
    assert RESULT_FIELDS == tuple(n for n in FROM_RESULT if n not in ("rollout_id", "model"))
    assert "reference_solution" in RESULT_READ


def test_checked_types_follow_the_model():
    types = field_types(RESULT_READ)
    assert types["reward"] == (int, float) and types["passed"] == (bool,)
    assert types["status"] == (str,)  # a Literal of strings
    assert types["rollout_id"] == (str,)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("reward", True, "reward is True, not int or float"),
        ("reward", "1", "reward is '1', not int or float"),
        ("passed", 1, "passed is 1, not bool"),
        ("status", 3, "status is 3, not str"),
        ("started", "now", "started is 'now', not int or float"),
    ],
)
def test_export_reader_refuses_a_field_of_the_wrong_type(tmp_path, field, value, message):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"rollout_id": "r", field: value}))
    with pytest.raises(ContagentError, match=message):
        read_result(path)


@pytest.mark.parametrize("reader", [read_result, load_result])
def test_both_readers_refuse_a_newer_result(tmp_path, reader):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"schema_version": RESULT_SCHEMA_VERSION + 1, "rollout_id": "r"}))
    with pytest.raises(NewerVersionError, match="is newer than this contagent reads"):
        reader(path)


@pytest.mark.parametrize("reader", [read_result, load_result])
def test_no_result_json_reads_as_none(tmp_path, reader):
    assert reader(tmp_path / "result.json") is None


def test_model_reader_names_the_field_it_refuses(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"rollout_id": "r", "status": "won"}))
    with pytest.raises(ContagentError, match=r"result\.json: status: Input should be"):
        load_result(path)
    path.write_text(RolloutResult(rollout_id="r", status="passed", reward=1.0).model_dump_json())
    got = load_result(path)
    assert got is not None and (got.status, got.reward) == ("passed", 1.0)


_json = json_values()
_keys = st.sampled_from([*RolloutResult.model_fields, "other"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_keys, _json, max_size=8) | _json)
def test_readers_raise_only_contagent_errors(value):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        path.write_text(json.dumps(value))
        for reader in (read_result, load_result):
            try:
                reader(path)
            except ContagentError as exc:
                assert "\n" not in str(exc)
