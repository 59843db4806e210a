"""``contagent validate`` on the atif folder: every field of every document, every file and
every entry of the index is checked against the rows (mutation tests)."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contagent.export.derive import build_row
from contagent.export.exporter import ExportOptions, export
from contagent.export.formats import DOCUMENT_FORMATS
from contagent.export.formats.rollout_data import RolloutData
from contagent.layout import ExportPaths, RolloutPaths
from contagent.validate.check import validate
from contagent.validate.document_folders import check_document_folder, differences
from tests.helpers import read_rows
from tests.strategies import json_values
from tools.token_samples import build_token_rollout

#: A main line with a side branch, parallel calls, reasoning, and a forked rollout
#: whose every step carries token ids and logprobs.
ROLLOUTS = ("side_call", "parallel_calls", "reasoning", "failed_run", "no_usage")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.samples import write_samples

    root = tmp_path_factory.mktemp("atif")
    every = root / "samples"
    write_samples(every)
    runs = root / "runs"
    for rid in ROLLOUTS:
        shutil.copytree(every / rid, runs / rid)
    build_token_rollout(runs, "forked")
    out = root / "out"
    export([runs], out, ExportOptions(formats=("atif", "prime-sft"), filter="all"))
    return out


@pytest.fixture
def out(exported: Path, tmp_path: Path) -> Path:
    """A fresh copy of the export (its rows point at the module's raw logs)."""
    copy_ = tmp_path / "out"
    shutil.copytree(exported, copy_)
    return copy_


@pytest.fixture(scope="module")
def rows_and_data(exported: Path) -> tuple[list[dict[str, Any]], dict[str, RolloutData]]:
    rows = read_rows(exported / "results.jsonl")
    data = {
        r["rollout_id"]: build_row(RolloutPaths(Path(r["raw_log"]["path"]).parent)).data
        for r in rows
    }
    return rows, data


def _problems(out: Path, rows_and_data: tuple[list, dict]) -> list[tuple[str | None, str]]:
    rows, data = rows_and_data
    folder = ExportPaths(out).document_folder("atif")
    _, problems, _ = check_document_folder(folder, DOCUMENT_FORMATS["atif"], rows, data)
    return problems


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field's path; of a long list of numbers, its first and last item only."""
    if isinstance(value, dict):
        yield path
        for key, sub in value.items():
            yield from _leaves(sub, (*path, key))
    elif isinstance(value, list):
        yield path
        scalars = value and not isinstance(value[0], (dict, list))
        items = [0, len(value) - 1] if scalars and len(value) > 2 else range(len(value))
        for i in dict.fromkeys(items):
            yield from _leaves(value[i], (*path, i))
    else:
        yield path


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.25
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, value[-1] if value else 0]
    if isinstance(value, dict):
        return {**value, "added": 1}
    return "x"


def _mutated(doc: Any, path: tuple[Any, ...]) -> Any:
    doc = copy.deepcopy(doc)
    if not path:
        return _changed(doc)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = _changed(parent[path[-1]])
    return doc


def test_the_export_is_healthy(out: Path, rows_and_data: tuple[list, dict]) -> None:
    assert _problems(out, rows_and_data) == []
    report = validate(out / "results.jsonl")
    assert report.ok, report.violations
    assert report.documents == 5


@pytest.mark.parametrize("rid", ["side_call", "forked"])
def test_every_field_of_a_document_is_checked(
    out: Path, rows_and_data: tuple[list, dict], rid: str
) -> None:
    path = out / "atif" / f"{rid}.json"
    doc = orjson.loads(path.read_bytes())
    assert rid != "forked" or any(
        "prompt_token_ids" in s.get("metrics", {}) for s in doc["steps"]
    ), "the forked rollout's document carries token ids"
    checked = 0
    for leaf in _leaves(doc):
        path.write_bytes(orjson.dumps(_mutated(doc, leaf)))
        problems = _problems(out, rows_and_data)
        assert any(r == rid and f"atif/{rid}.json" in p for r, p in problems), leaf
        checked += 1
    assert checked > 50
    # a field removed is as wrong as a field changed
    for key in list(doc):
        path.write_bytes(orjson.dumps({k: v for k, v in doc.items() if k != key}))
        assert _problems(out, rows_and_data), key


def test_a_dropped_added_or_unreadable_file_is_reported(
    out: Path, rows_and_data: tuple[list, dict]
) -> None:
    folder = out / "atif"
    (folder / "reasoning.json").unlink()
    (folder / "stray.json").write_bytes(b"{}")
    (folder / "side_call.json").write_bytes(b"{not json")
    problems = _problems(out, rows_and_data)
    assert ("reasoning", "atif/reasoning.json: listed in the index but missing") in problems
    assert (None, "atif/stray.json: a file the index does not list") in problems
    assert any(r == "side_call" and "unreadable" in p for r, p in problems)


def _index_edits() -> list[tuple[str, Any]]:
    def written(i: dict) -> list:
        return i["written"]

    def left(i: dict) -> list:
        return i["left_out"]

    return [
        ("format", lambda i: i.update(format="trl")),
        ("document_version", lambda i: i.update(document_version="ATIF-v1.7")),
        ("filter", lambda i: i.update(filter="passed")),
        ("filter unknown", lambda i: i.update(filter="some")),
        ("records_version newer", lambda i: i.update(records_version=99)),
        ("key added", lambda i: i.update(note="x")),
        ("written id", lambda i: written(i)[0].update(rollout_id="ghost")),
        ("written file", lambda i: written(i)[0].update(file="other.json")),
        ("written dropped", lambda i: written(i).pop(0)),
        ("written twice", lambda i: written(i).append(dict(written(i)[0]))),
        ("written order", lambda i: written(i).reverse()),
        ("left-out reason", lambda i: left(i)[0].update(reason="x")),
        ("left-out dropped", lambda i: left(i).pop(0)),
        ("left-out added", lambda i: left(i).append({"rollout_id": "ghost", "reason": "x"})),
        ("left-out twice", lambda i: left(i).append(dict(left(i)[0]))),
        ("not an object", lambda i: i.clear()),
    ]


@pytest.mark.parametrize(("what", "edit"), _index_edits(), ids=[e[0] for e in _index_edits()])
def test_every_edit_of_the_index_is_reported(
    out: Path, rows_and_data: tuple[list, dict], what: str, edit: Any
) -> None:
    path = out / "atif" / "_index.json"
    index = orjson.loads(path.read_bytes())
    assert index["left_out"] and len(index["written"]) > 1
    edit(index)
    path.write_bytes(orjson.dumps(index))
    assert _problems(out, rows_and_data), what


def test_a_missing_index_or_folder_is_a_violation(out: Path) -> None:
    (out / "atif" / "_index.json").unlink()
    report = validate(out / "results.jsonl")
    assert any("no _index.json" in v.reason for v in report.violations)
    shutil.rmtree(out / "atif")
    report = validate(out / "results.jsonl")
    reasons = [v.reason for v in report.violations]
    assert "atif/: the export wrote this format but the folder is gone" in reasons


def test_the_index_names_the_formats_written_beside_it(out: Path) -> None:
    shutil.rmtree(out / "prime-sft")
    (out / "export-summary.json").unlink()
    reasons = [v.reason for v in validate(out / "results.jsonl").violations]
    assert reasons == ["prime-sft/: the export wrote this format but the folder is gone"]


def test_differences_name_the_path() -> None:
    assert differences({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ["a[1].b"]
    assert differences({"a": 1}, {"a": 1.0}) == ["a"]
    assert differences({"a": True}, {"a": 1}) == ["a"]
    assert differences([1], [1, 2]) == [" (length)"]
    assert differences({"a": 1, "z": 0}, {"a": 1}) == ["z"]
    assert differences({}, {"a": 1}) == ["a"]


_JSON = json_values(max_leaves=20, max_size=4, text_size=8)


def _index_like() -> st.SearchStrategy[Any]:
    """Index-shaped objects with any field of any type, and any JSON at all."""
    fields = st.fixed_dictionaries(
        {},
        optional={
            "format": _JSON | st.just("atif"),
            "records_version": _JSON | st.just(1),
            "document_version": _JSON | st.just("ATIF-v1.8"),
            "filter": _JSON | st.sampled_from(["passed", "all"]),
            "formats": _JSON | st.just(["atif"]),
            "written": _JSON | st.just([{"rollout_id": "side_call", "file": "side_call.json"}]),
            "left_out": _JSON | st.just([{"rollout_id": "x", "reason": "y"}]),
        },
    )
    return fields | _JSON


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=_index_like(), raw=st.binary(max_size=40))
def test_any_index_gives_problems_never_a_crash(
    out: Path, rows_and_data: tuple[list, dict], value: Any, raw: bytes
) -> None:
    path = out / "atif" / "_index.json"
    for data in (orjson.dumps(value), raw):
        path.write_bytes(data)
        problems = _problems(out, rows_and_data)
        assert problems and all(isinstance(p, str) and p for _, p in problems)
