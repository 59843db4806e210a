"""``policy.jsonl``'s one writer and one reader: what the engine writes reads back as it
was, the version gate refuses a newer journal, and each field the model checks is refused,
in one line naming the file, line and field, when it is wrong."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.rawlog.policy_journal import (
    POLICY_JOURNAL_VERSION,
    PolicyEvent,
    append_event,
    read_policy_journal,
)
from contagent.versions import NewerVersionError
from tests.strategies import json_values

VERSION = {"schema_version": 1, "event": "version", "time": 1.5, "version": 2}
PAUSE = {"schema_version": 1, "event": "pause", "time": 2.0, "in_flight": 3}
RESUME = {"schema_version": 1, "event": "resume", "time": 3.0, "held": 1}


def _write(log_dir: Path, *lines: Any) -> Path:
    path = RunPaths(log_dir).policy_journal
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_no_journal_reads_as_none(tmp_path: Path) -> None:
    assert read_policy_journal(tmp_path) is None


def test_a_line_without_a_version_is_version_1(tmp_path: Path) -> None:
    line = {k: v for k, v in VERSION.items() if k != "schema_version"}
    _write(tmp_path, line)
    (event,) = read_policy_journal(tmp_path) or []
    assert (event.schema_version, event.event, event.version) == (1, "version", 2)


def test_a_newer_journal_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, VERSION, {**PAUSE, "schema_version": POLICY_JOURNAL_VERSION + 1})
    with pytest.raises(NewerVersionError) as caught:
        read_policy_journal(tmp_path)
    assert str(caught.value) == (
        f"{path}:2: schema_version {POLICY_JOURNAL_VERSION + 1} is newer than this "
        f"contagent reads ({POLICY_JOURNAL_VERSION}); upgrade contagent"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({**VERSION, "schema_version": 0}, "schema_version 0 is not a version number"),
        ({**VERSION, "event": "swap"}, "event: Input should be 'version', 'pause'"),
        ({**VERSION, "time": "now"}, "time: Input should be a valid number"),
        ({k: v for k, v in VERSION.items() if k != "time"}, "time: Field required"),
        ({**VERSION, "version": -1}, "version: Input should be greater than or equal to 0"),
        ({**VERSION, "version": True}, "version: Input should be a valid integer"),
        ({**VERSION, "version": None}, "a version event needs version"),
        ({**VERSION, "weight_version": 8}, "weight_version: Input should be a valid string"),
        ({**PAUSE, "weight_version": "step-8"}, "a pause event has no weight_version"),
        ({**PAUSE, "in_flight": -1}, "in_flight: Input should be greater than or equal to 0"),
        ({**PAUSE, "in_flight": None}, "a pause event needs in_flight"),
        ({**PAUSE, "held": 0}, "a pause event has no held"),
        ({**RESUME, "held": -2}, "held: Input should be greater than or equal to 0"),
        ({**RESUME, "held": None}, "a resume event needs held"),
        ({**RESUME, "version": 1}, "a resume event has no version"),
        ({**RESUME, "by": "me"}, "by: Extra inputs are not permitted"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_each_checked_field_is_refused_naming_the_line(
    tmp_path: Path, line: Any, message: str
) -> None:
    path = _write(tmp_path, VERSION, PAUSE, line)
    with pytest.raises(ContagentError) as caught:
        read_policy_journal(tmp_path)
    text = str(caught.value)
    assert text.startswith(f"{path}:3: ") and message in text and "\n" not in text


def test_a_torn_line_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, VERSION)
    with path.open("a") as fh:
        fh.write('{"event": "pau')
    with pytest.raises(ContagentError, match=r"policy\.jsonl:2: malformed JSON"):
        read_policy_journal(tmp_path)


_counts = st.integers(min_value=0, max_value=2**40)
_events = st.one_of(
    st.builds(
        dict,
        event=st.just("version"),
        version=_counts,
        weight_version=st.none() | st.text(max_size=20),
    ),
    st.builds(dict, event=st.sampled_from(["pause", "idle"]), in_flight=_counts),
    st.builds(dict, event=st.just("resume"), held=_counts),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_events, max_size=6))
def test_what_is_appended_reads_back_as_written(fields: list[dict[str, Any]]) -> None:
    written = [PolicyEvent.now(f.pop("event"), **f) for f in fields]
    with tempfile.TemporaryDirectory() as tmp:
        for event in written:
            append_event(Path(tmp), event)
        assert read_policy_journal(Path(tmp)) == (written or None)


_json = json_values()
_keys = st.sampled_from([*PolicyEvent.model_fields, "other"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(_keys, _json, max_size=6) | _json, min_size=1, max_size=3))
def test_the_reader_raises_only_one_line_contagent_errors(lines: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _write(Path(tmp), *lines)
        try:
            events = read_policy_journal(Path(tmp))
        except ContagentError as exc:
            assert "\n" not in str(exc)
        else:
            assert events is not None
            assert all(isinstance(e, PolicyEvent) for e in events)
