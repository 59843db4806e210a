"""The atif format: a Harbor ATIF trajectory per selected rollout, and the folder's index."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent.errors import ContagentError
from contagent.export.exporter import ExportOptions, export
from contagent.export.formats.atif import ATIF_VERSION, Atif, trajectory
from contagent.export.formats.documents import outcome
from contagent.export.formats.rollout_data import RolloutData
from contagent.rawlog.read import read_exchanges
from contagent.validate.check import validate
from tests.helpers import REPO, cli, read_rows
from tools.rollouts import RolloutBuilder, assistant
from tools.token_samples import TOKEN_SCENARIOS, build_token_rollouts

TASK = "Write pass:<secret> to result.txt."


def _export(runs: Path, out: Path, **options: Any) -> tuple[dict[str, dict], dict[str, Any]]:
    options.setdefault("formats", ("atif",))
    options.setdefault("filter", "all")
    export([runs], out, ExportOptions(**options))
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    return rows, orjson.loads((out / "atif" / "_index.json").read_bytes())


def _doc(out: Path, rid: str) -> dict[str, Any]:
    return orjson.loads((out / "atif" / f"{rid}.json").read_bytes())


def _agent_steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in doc["steps"] if s["source"] == "agent" and not s.get("is_copied_context")]


def test_the_index_accounts_for_every_row_and_validate_is_healthy(
    samples: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    rows, index = _export(samples, out, formats=("atif", "prime-sft"), filter="passed")
    assert index["filter"] == "passed" and index["formats"] == ["atif", "prime-sft"]
    assert index["document_version"] == ATIF_VERSION
    written = [w["rollout_id"] for w in index["written"]]
    left = {e["rollout_id"]: e["reason"] for e in index["left_out"]}
    assert written == [r for r, row in rows.items() if row["training_ready"] and row["passed"]]
    assert written and left and set(written) | set(left) == set(rows)
    for rid, reason in left.items():
        row = rows[rid]
        if row["training_ready"]:
            assert reason == "--filter passed: the rollout did not pass", rid
        else:
            assert reason == f"not training-ready ({', '.join(row['not_ready_kinds'])})", rid
    on_disk = sorted(p.name for p in (out / "atif").iterdir())
    assert on_disk == sorted(["_index.json", *(f"{r}.json" for r in written)])
    report = validate(out / "results.jsonl")
    assert report.ok, report.violations
    assert report.documents == len(written)


def test_steps_follow_the_conversation_with_observations_and_metrics(
    samples: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    rows, _ = _export(samples, out)
    doc, row = _doc(out, "parallel_calls"), rows["parallel_calls"]
    assert doc["schema_version"] == ATIF_VERSION and doc["trajectory_id"] == "parallel_calls"
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    assert [s["source"] for s in doc["steps"][:2]] == ["system", "user"]
    agents = _agent_steps(doc)
    assert [s["extra"]["exchange_index"] for s in agents] == [
        s["exchange_index"] for s in row["steps"]
    ]
    for step, kept in zip(agents, row["steps"], strict=True):
        assert step["llm_call_count"] == 1
        assert step["metrics"]["prompt_tokens"] == kept["usage"]["prompt_tokens"]
        assert step["metrics"]["completion_tokens"] == kept["usage"]["completion_tokens"]
        calls = kept["response"].get("tool_calls") or []
        assert [c["tool_call_id"] for c in step.get("tool_calls", [])] == [c["id"] for c in calls]
        for c, got in zip(calls, step.get("tool_calls", []), strict=True):
            assert got["arguments"] == orjson.loads(c["function"]["arguments"])
    # the parallel calls are answered in the observation of their own step, in the
    # order the agent sent the results
    first = agents[0]
    answered = [r["source_call_id"] for r in first["observation"]["results"]]
    assert sorted(answered) == sorted(c["tool_call_id"] for c in first["tool_calls"])
    assert len(answered) > 1
    totals = doc["final_metrics"]
    assert totals["total_prompt_tokens"] == row["token_usage"]["selected"]["prompt_tokens"]
    assert totals["total_completion_tokens"] == row["token_usage"]["selected"]["completion_tokens"]
    assert totals["total_steps"] == len(doc["steps"])
    assert doc["extra"]["reward"] == row["reward"] and doc["extra"]["passed"] == row["passed"]


def test_reasoning_is_kept_and_dropped_with_drop_reasoning(samples: Path, tmp_path: Path) -> None:
    _export(samples, tmp_path / "a")
    kept = [s.get("reasoning_content") for s in _agent_steps(_doc(tmp_path / "a", "reasoning"))]
    assert any(kept)
    _export(samples, tmp_path / "b", drop_reasoning=True)
    dropped = [s.get("reasoning_content") for s in _agent_steps(_doc(tmp_path / "b", "reasoning"))]
    assert not any(dropped) and len(dropped) == len(kept)
    assert validate(tmp_path / "b" / "results.jsonl").ok


def test_side_branches_are_embedded_subagents_with_copied_context(
    samples: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    rows, _ = _export(samples, out)
    row, doc = rows["side_call"], _doc(out, "side_call")
    root = row["steps"][-1]["branch"]
    assert doc["extra"]["branch"] == root
    (side,) = doc["subagent_trajectories"]
    assert side["trajectory_id"] == "side_call.branch-1" and side["session_id"] == "side_call"
    own = {s["exchange_index"] for s in row["steps"] if s["branch"] == 1}
    assert {s["extra"]["exchange_index"] for s in _agent_steps(side)} == own
    copied = [s for s in side["steps"] if s.get("is_copied_context")]
    # the critic's branch starts with the main line's first turn, which it does not train
    assert copied and all("metrics" not in s for s in copied)
    assert side["final_metrics"]["total_prompt_tokens"] == sum(
        s["usage"]["prompt_tokens"] for s in row["steps"] if s["branch"] == 1
    )
    condensed = _doc(out, "condensed")
    assert condensed["extra"]["branch"] == rows["condensed"]["steps"][-1]["branch"] == 2
    assert [t["extra"]["branch"] for t in condensed["subagent_trajectories"]] == [0, 1]


def _cached_rollout(root: Path) -> None:
    b = RolloutBuilder("cached", TASK)
    i = b.request()
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "total_tokens": 110,
        "prompt_tokens_details": {"cached_tokens": 64},
    }
    b.outcome(i, "completed", message=assistant("Done."), usage=usage)  # type: ignore[arg-type]
    b.write(root, {"passed": True, "reward": 0.5, "agent": "codex", "agent_version": "0.61.0"})


def test_cached_tokens_agent_and_reward_come_from_the_raw_log_and_result(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _cached_rollout(runs)
    out = tmp_path / "out"
    _export(runs, out)
    doc = _doc(out, "cached")
    (step,) = _agent_steps(doc)
    assert step["metrics"] == {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 64}
    assert doc["final_metrics"]["total_cached_tokens"] == 64
    assert doc["agent"]["name"] == "codex" and doc["agent"]["version"] == "0.61.0"
    assert doc["agent"]["model_name"] == "qwen3-coder-30b"
    assert doc["extra"]["reward"] == 0.5
    assert validate(out / "results.jsonl").ok


def test_token_ids_and_logprobs_are_the_raw_logs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    build_token_rollouts(runs)
    out = tmp_path / "out"
    rows, index = _export(runs, out)
    with_ids = 0
    for entry in index["written"]:
        rid = entry["rollout_id"]
        raw = read_exchanges(runs / rid / "exchanges.jsonl")
        doc = _doc(out, rid)
        sound = not rows[rid]["tokens"]["kinds"]
        steps = [*_agent_steps(doc)]
        for sub in doc.get("subagent_trajectories", []):
            steps += _agent_steps(sub)
        for step in steps:
            metrics = step["metrics"]
            if not sound:
                assert "prompt_token_ids" not in metrics, rid
                continue
            tokens = raw.outcomes[step["extra"]["exchange_index"]]["tokens"]
            assert metrics["prompt_token_ids"] == tokens["prompt_token_ids"], rid
            assert metrics["completion_token_ids"] == tokens["choices"][0]["token_ids"], rid
            assert metrics["logprobs"] == tokens["choices"][0]["logprobs"], rid
            with_ids += 1
    assert with_ids >= sum(1 for _, want in TOKEN_SCENARIOS.values() if want.written)
    assert validate(out / "results.jsonl").ok


def _row(samples: Path, tmp_path: Path, rid: str) -> dict[str, Any]:
    runs = tmp_path / "one"
    shutil.copytree(samples / rid, runs / rid)
    rows, _ = _export(runs, tmp_path / "one-out")
    return rows[rid]


def test_a_row_atif_cannot_hold_is_left_out_with_the_reason(samples: Path, tmp_path: Path) -> None:
    row = _row(samples, tmp_path, "clean_pass")
    bad = copy.deepcopy(row)
    bad["steps"][0]["response"]["tool_calls"][0]["function"]["arguments"] = "[1, 2]"
    with pytest.raises(ContagentError, match="not a JSON object; the atif format"):
        trajectory(bad, RolloutData())
    doc, reason = outcome(Atif(), bad, RolloutData(), "all")
    assert doc is None and reason and "call_1" in reason
    orphan = copy.deepcopy(row)
    orphan["steps"][1]["messages"][1]["tool_call_id"] = "call_x"
    assert "answers no call" in (outcome(Atif(), orphan, RolloutData(), "all")[1] or "")
    unsafe = {**row, "rollout_id": "../escape"}
    assert "safe" in (outcome(Atif(), unsafe, RolloutData(), "all")[1] or "")


def test_unsafe_rollout_ids_never_become_paths(samples: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(samples / "clean_pass", runs / "clean_pass")
    result = orjson.loads((runs / "clean_pass" / "result.json").read_bytes())
    (runs / "clean_pass" / "result.json").write_bytes(
        orjson.dumps({**result, "rollout_id": "../../escape"})
    )
    out = tmp_path / "out"
    _, index = _export(runs, out)
    assert index["written"] == [] and "safe" in index["left_out"][0]["reason"]
    assert not list(tmp_path.rglob("escape*"))
    assert validate(out / "results.jsonl").ok


def test_a_new_export_replaces_the_folder_whole(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _export(samples, out, filter="all")
    (out / "atif" / "stray.json").write_bytes(b"{}")
    _, index = _export(samples, out, filter="passed")
    names = {p.name for p in (out / "atif").iterdir()}
    assert "stray.json" not in names and len(names) == len(index["written"]) + 1
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    assert validate(out / "results.jsonl").ok


def test_the_cli_writes_and_validates_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runs = REPO / "data" / "rollouts"
    proc = cli("export", str(runs), "--out", str(out), "--format", "atif", check=True)
    index = orjson.loads((out / "atif" / "_index.json").read_bytes())
    printed = proc.stdout + proc.stderr
    assert re.search(rf"atif: trajectories\s*│\s*{len(index['written'])}\s", printed)
    proc = cli("validate", str(out / "results.jsonl"), check=True)
    printed = " ".join((proc.stdout + proc.stderr).split())
    assert f"{len(index['written'])} documents): healthy" in printed
    proc = cli("export", str(runs), "--out", str(out), "--format", "atif", "--push-to-hub", "o/n")
    assert proc.returncode == 2 and "atif is not one" in proc.stderr
