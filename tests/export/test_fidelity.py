"""Rules for traffic shaped like real models, agents and harnesses, each checked directly."""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from contagent import rules
from contagent.core.rows import SCHEMA_VERSION as ROW_SCHEMA_VERSION
from contagent.errors import ContagentError
from contagent.export.exporter import ExportOptions, export
from contagent.layout import find_rollouts
from contagent.rawlog.records import SCHEMA_VERSION
from contagent.validate import check
from contagent.validate.check import validate
from contagent.wire import chat
from contagent.wire.responses import is_responses_path
from tests.helpers import cli, read_rows
from tools.rollouts import assistant, call, parts


def _export(samples: Path, out: Path, *names: str, **options: object) -> dict[str, dict]:
    export([samples / n for n in names], out, ExportOptions(filter="all", **options))  # type: ignore[arg-type]
    assert validate(out / "results.jsonl").ok
    return {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}


def _parquet(out: Path) -> list[dict]:
    return [
        r
        for s in sorted((out / "prime-sft" / "data").glob("*.parquet"))
        for r in pq.read_table(s).to_pylist()
    ]


def test_call_identity_is_id_name_and_canonical_arguments() -> None:
    mine = assistant(None, call("functions.terminal:0", "terminal", command="ls", path="/"))
    key = rules.consumption_key(mine)
    reordered = {"role": "assistant", "tool_calls": [{"id": "functions.terminal:0", "type": "function",
                 "function": {"name": "terminal", "arguments": '{"path": "/", "command": "ls"}'}}]}  # fmt: skip
    assert rules.carries(key, *rules.history_keys([reordered]))
    other = assistant(None, call("functions.terminal:0", "terminal", command="pwd"))
    assert not rules.carries(key, *rules.history_keys([other]))
    renamed = assistant(None, call("functions.terminal:0", "file_editor", command="ls", path="/"))
    assert not rules.carries(key, *rules.history_keys([renamed]))


def test_side_call_does_not_cut_the_main_line(samples: Path, tmp_path: Path) -> None:
    row = _export(samples, tmp_path / "out", "side_call")["side_call"]
    by_index = {s["exchange_index"]: s for s in row["steps"]}
    assert (by_index[2]["branch"], by_index[2]["extends"]) == (0, 0)  # main line goes on
    assert (by_index[1]["branch"], by_index[1]["extends"]) == (1, 0)  # the critic forks
    main = next(r for r in _parquet(tmp_path / "out") if r["branch"] == 0)
    turns = [m for m in main["messages"] if m["role"] == "assistant"]
    assert turns[0]["reasoning_content"] == "The secret is in a file."  # the model's own turn
    assert len(turns) == 3


def test_restart_keeps_each_consumed_copy(samples: Path, tmp_path: Path) -> None:
    row = _export(samples, tmp_path / "out", "restart")["restart"]
    kept = {s["exchange_index"]: s for s in row["steps"]}
    assert kept[1]["consumed"] and kept[3]["consumed"]
    assert kept[1]["branch"] != kept[3]["branch"]
    assert not [e for e in row["excluded"] if e["reason"] == "duplicate_retry"]


def test_text_parts_join_with_a_newline(samples: Path, tmp_path: Path) -> None:
    _export(samples, tmp_path / "out", "content_parts")
    (record,) = _parquet(tmp_path / "out")
    assert record["messages"][1]["content"].endswith("holds a secret. Write `pass:<secret>` to "
                                                    "~/workspace/result.txt.\nUse the terminal.")  # fmt: skip
    assert chat.message_text(parts("a") + parts("b")) == "a\nb"


@pytest.mark.parametrize("drop", [False, True])
def test_reasoning_under_either_name(samples: Path, tmp_path: Path, drop: bool) -> None:
    row = _export(samples, tmp_path / "out", "reasoning_field", drop_reasoning=drop)[
        "reasoning_field"
    ]
    first = row["steps"][0]["response"]
    assert "reasoning" not in first
    assert first.get("reasoning_content") == (None if drop else "The secret is in a file; read it.")
    texts = [m["reasoning_content"] for r in _parquet(tmp_path / "out") for m in r["messages"]]
    assert any(texts) is not drop


def test_two_different_reasonings_conflict() -> None:
    msg = {"role": "assistant", "content": "x", "reasoning": "a", "reasoning_content": "b"}
    assert rules.has_think_conflict(msg)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -1, "completion_tokens": 2},
        {"prompt_tokens": 1.5, "completion_tokens": 2},
        {"prompt_tokens": True, "completion_tokens": 2},
        {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 4},
        {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": "3"},
    ],
)
def test_implausible_usage_is_no_usage(usage: dict) -> None:
    assert chat.usage_counts(usage) is None


def test_plausible_usage_is_kept() -> None:
    assert chat.usage_counts({"input_tokens": 1, "output_tokens": 2}) == {
        "prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}  # fmt: skip


def test_route_decides_not_body_shape() -> None:
    outcome = {"outcome": "completed", "status": 200, "response": {"data": []}}
    chat_req = {"path": "/v1/chat/completions?x=1", "body": "a JSON string"}
    assert rules.classify(chat_req, outcome)[0] == "unreadable_request"
    assert rules.classify({"path": "/v1/models", "body": None}, outcome)[0] == "unsupported_route"
    lone = {"path": "/v1/chat/completions", "body": None,
            "body_text": '{"messages": [{"role": "user", "content": "\\udcff"}]}'}  # fmt: skip
    status, messages, _ = rules.classify(lone, outcome)
    assert status == "unreadable_request" and messages == [{"role": "user", "content": "\udcff"}]


@pytest.mark.parametrize(
    ("path", "chat_route", "responses"),
    [
        ("/v1/chat/completions", True, False),
        ("/openai/v1/chat/completions/?stream=1", True, False),
        ("/v1/responses?x=1", True, True),
        ("/v1/responses/resp_1/input_items", False, False),
        ("/v1/models", False, False),
        (None, False, False),
    ],
)
def test_routes_are_matched_without_query_or_trailing_slash(
    path: object, chat_route: bool, responses: bool
) -> None:
    assert rules.is_chat_route(path) is chat_route
    assert is_responses_path(path) is responses


def test_symlinked_rollouts_are_followed_and_loops_end(samples: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "linked").symlink_to(samples / "clean_pass", target_is_directory=True)
    (runs / "loop").symlink_to(runs, target_is_directory=True)
    found = find_rollouts([runs])
    assert [p.root for p in found] == [(samples / "clean_pass").resolve()]


def test_dangling_log_link_is_an_error_naming_it(tmp_path: Path) -> None:
    rollout = tmp_path / "runs" / "r1"
    rollout.mkdir(parents=True)
    (rollout / "exchanges.jsonl").symlink_to(tmp_path / "gone.jsonl")
    with pytest.raises(ContagentError, match=r"r1/exchanges.jsonl: a link .* does not exist"):
        find_rollouts([tmp_path / "runs"])


def test_bad_result_type_names_the_rollout(samples: Path, tmp_path: Path) -> None:
    result = samples / "clean_pass" / "result.json"
    result.write_bytes(orjson.dumps({**orjson.loads(result.read_bytes()), "passed": "yes"}))
    proc = cli("export", str(samples), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "clean_pass/result.json: passed is 'yes', not bool" in proc.stderr


def test_newer_schema_versions_are_refused(samples: Path, tmp_path: Path) -> None:
    log = samples / "clean_pass" / "exchanges.jsonl"
    good = log.read_bytes()
    first, rest = good.split(b"\n", 1)
    newer = SCHEMA_VERSION + 1
    # a record carries the lowest version that holds its fields (records.with_policy_version)
    stamped, count = re.subn(rb'"schema_version":\d+', b'"schema_version":%d' % newer, first)
    assert count == 1
    log.write_bytes(stamped + b"\n" + rest)
    proc = cli("export", str(samples / "clean_pass"), "--out", str(tmp_path / "o1"))
    assert proc.returncode == 2 and f"schema_version {newer} is newer" in proc.stderr
    log.write_bytes(good)
    out = tmp_path / "o2"
    export([samples / "clean_pass"], out)
    rows = read_rows(out / "results.jsonl")
    row_newer = ROW_SCHEMA_VERSION + 1
    newer_row = {**rows[0], "schema_version": row_newer}
    (out / "results.jsonl").write_bytes(orjson.dumps(newer_row) + b"\n")
    proc = cli("validate", str(out / "results.jsonl"))
    assert proc.returncode == 2 and f"schema_version {row_newer} is newer" in proc.stderr


def test_validator_internal_error_has_its_own_exit_code(
    samples: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    export([samples / "clean_pass"], out)

    def broken(*args: object) -> list[str]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(check, "derived_problems", broken)
    with pytest.raises(ContagentError) as err:
        validate(out / "results.jsonl")
    assert err.value.exit_code == check.INTERNAL_ERROR_EXIT != 1
    assert "internal error" in str(err.value) and "\n" not in str(err.value)


def test_export_without_its_summary_still_validates(samples: Path, tmp_path: Path) -> None:
    """Deleting export-summary.json leaves a healthy export healthy."""
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all"))
    os.remove(out / "export-summary.json")
    assert validate(out / "results.jsonl").ok


def test_a_leading_think_block_beside_reasoning_is_no_conflict() -> None:
    msg = {"role": "assistant", "content": "<think>a</think>b", "reasoning": "a"}
    assert not rules.has_think_conflict(msg)
    assert rules.has_think_conflict({**msg, "content": "b <think>a</think>"})


def test_an_unreadable_folder_is_an_error_not_a_skip(
    samples: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if str(path).endswith("clean_pass"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(ContagentError, match="clean_pass: cannot read"):
        find_rollouts([samples])
