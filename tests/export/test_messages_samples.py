"""The Messages-API samples under data/rollouts/messages: generated as committed, exported
with the same outcome as their chat twins, and validated so that a lost fact is caught."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import REPO, assert_outcome, assert_same_as_generated, export_and_validate
from tools.messages_samples import OWN, expectations, write_messages_samples


def test_committed_messages_samples_match_their_generator(tmp_path: Path) -> None:
    write_messages_samples(tmp_path)
    assert_same_as_generated(
        REPO / "data" / "rollouts" / "messages",
        tmp_path,
        list(expectations()),
        "python -m tools.messages_samples data/rollouts/messages",
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("messages")
    write_messages_samples(root)
    return export_and_validate(root)


@pytest.mark.parametrize("name", list(expectations()))
def test_messages_sample_outcome(name: str, exported: dict[str, dict]) -> None:
    """Each chat rule, on the Messages path: the same outcome as its chat twin."""
    assert_outcome(exported[name], expectations()[name])


def test_own_samples_keep_what_the_api_carried(exported: dict[str, dict]) -> None:
    assert set(OWN) <= {name.removeprefix("messages_") for name in exported}
    thinking = exported["messages_thinking"]["steps"]
    assert [s["response"].get("reasoning_content") for s in thinking] == [
        "It is in a file.",
        "Write the answer.",
        None,
    ]
    steps = exported["messages_system_in_messages"]["steps"]
    assert [m["role"] for m in steps[0]["messages"]] == ["system", "user", "system"]
    assert [s["extends"] for s in steps] == [None, 0, 1]
    tools = [
        m
        for s in exported["messages_tool_error"]["steps"]
        for m in s["messages"]
        if m["role"] == "tool"
    ]
    assert [m["is_error"] for m in tools] == [False, True]
    cache = exported["messages_cache_usage"]
    assert [s["usage"]["prompt_tokens"] for s in cache["steps"]] == [912, 952, 992]
    assert cache["token_usage"]["billed"]["prompt_tokens"] == 912 + 952 + 992


def _flip_tool_error(row: dict[str, Any]) -> None:
    for step in row["steps"]:
        for m in step["messages"]:
            if m.get("is_error") is True:
                m["is_error"] = False


def _drop_cache_counts(row: dict[str, Any]) -> None:
    usage = row["steps"][0]["usage"]
    usage["prompt_tokens"] -= 900  # the first turn's cache_creation_input_tokens
    usage["total_tokens"] -= 900


@pytest.mark.parametrize(
    ("rollout", "mutate"),
    [("messages_tool_error", _flip_tool_error), ("messages_cache_usage", _drop_cache_counts)],
)
def test_validation_catches_a_lost_messages_fact(
    tmp_path: Path, rollout: str, mutate: Callable[[dict[str, Any]], None]
) -> None:
    """A tool error recorded as a success, or a prompt counted without its cached tokens,
    is a violation naming the rollout."""
    from contagent.export.exporter import ExportOptions, export
    from contagent.validate.check import validate

    root, out = tmp_path / "samples", tmp_path / "out"
    write_messages_samples(root)
    export([root], out, ExportOptions(filter="all"))
    rows = [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]
    for row in rows:
        if row["rollout_id"] == rollout:
            mutate(row)
    (out / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    report = validate(out / "results.jsonl")
    assert not report.ok and {v.rollout_id for v in report.violations} == {rollout}
