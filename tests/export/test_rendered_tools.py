"""The tools the trainer formats carry: those the model saw, as its server rendered them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from contagent import rules
from contagent.export.dataset_folder import rows_to_batch
from contagent.export.exporter import ExportOptions, export
from contagent.export.formats import FORMATS
from contagent.rules import Unrenderable, rendered_tools, trainer_tools
from contagent.validate.check import validate
from tests.helpers import REPO, builtin_tools_on_vllm, cli

VLLM = {"name": "vllm", "version": "0.32.0"}
EMPTY = {"type": "object", "properties": {}}
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
BUILTIN = REPO / "data" / "rollouts" / "responses" / "responses_builtin_tools"
BOTH = ("prime-sft", "trl")


def fn(name: str, parameters: Any = SCHEMA, **rest: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **rest, "parameters": parameters}}


def test_function_tools_map_the_same_on_every_server() -> None:
    chat = fn("terminal", description="Run a command.")
    for server in (VLLM, {"name": "sglang"}, None):
        assert rendered_tools([chat], "chat", server) == [chat]
        assert rendered_tools([chat], "responses", server) == [chat]


@pytest.mark.parametrize("parameters", [None, {}])
def test_a_function_without_parameters_gets_an_empty_object_schema(parameters: Any) -> None:
    bare = {"type": "function", "function": {"name": "placeholder"}}
    given = bare if parameters is None else fn("placeholder", parameters)
    assert rendered_tools([given], "messages", None) == [fn("placeholder", EMPTY)]


def test_an_anthropic_tool_with_an_input_schema_is_a_function() -> None:
    tool = {"name": "Bash", "description": "Run.", "input_schema": SCHEMA, "cache_control": {}}
    assert rendered_tools([tool], "messages", VLLM) == [fn("Bash", description="Run.")]


@pytest.mark.parametrize(
    "parameters", [{"type": "array", "items": {}}, "object", {"properties": {}}]
)
def test_a_schema_that_is_not_an_object_is_not_rendered(parameters: Any) -> None:
    with pytest.raises(Unrenderable, match="not an object"):
        rendered_tools([fn("odd", parameters)], "chat", VLLM)


def test_vllm_responses_flattens_namespaces_and_leaves_built_ins_out() -> None:
    tools = [
        fn("terminal"),
        {"type": "web_search"},
        {
            "type": "namespace",
            "name": "multi_agent_v1",
            "description": "Sub-agents.",
            "tools": [
                {"type": "function", "name": "spawn", "parameters": {}},
                {"type": "function", "name": "wait", "description": "W.", "parameters": SCHEMA},
            ],
        },
    ]
    assert rendered_tools(tools, "responses", VLLM) == [
        fn("terminal"),
        fn("multi_agent_v1__spawn", EMPTY),
        fn("multi_agent_v1__wait", description="W."),
    ]


@pytest.mark.parametrize(
    ("tool", "api", "server", "model", "why"),
    [
        ({"type": "web_search"}, "responses", None, None, "no server recorded"),
        ({"type": "web_search"}, "responses", {"name": "sglang"}, None, "'sglang'"),
        ({"type": "namespace", "name": "n", "tools": []}, "responses", None, None, "not known"),
        ({"type": "custom", "name": "apply"}, "responses", VLLM, None, "not checked"),
        ({"type": "web_search"}, "responses", VLLM, "openai/gpt-oss-20b", "not checked"),
        ({"type": "web_search_20250305", "name": "w"}, "messages", VLLM, None, "not checked"),
        ({"type": "web_search"}, "chat", VLLM, None, "not checked"),
        ("terminal", "chat", VLLM, None, "not an object"),
    ],
)
def test_a_rendering_not_known_is_refused(
    tool: Any, api: str, server: Any, model: Any, why: str
) -> None:
    with pytest.raises(Unrenderable, match=why):
        rendered_tools([fn("terminal"), tool], api, server, model)


def test_trainer_tools_unions_per_branch_and_a_request_s_server_wins() -> None:
    ns = {"type": "namespace", "name": "m", "tools": [{"type": "function", "name": "s"}]}
    steps = [
        (0, 0, {"api": "responses", "body": {"tools": [fn("a"), ns]}, "server": VLLM}),
        (1, 1, {"api": "chat", "body": {"tools": [fn("b")]}}),
        (0, 2, {"api": "responses", "body": {"tools": [fn("a")]}, "server": VLLM}),
    ]
    got = trainer_tools(steps, None)
    assert got == rules.TrainerTools({0: [fn("a"), fn("m__s", EMPTY)], 1: [fn("b")]})
    steps[0][2]["server"] = None  # falls back to result.json's: none
    assert "request 0: a 'namespace' tool" in (trainer_tools(steps, None).unrenderable or "")
    assert trainer_tools(steps, VLLM).unrenderable is None


def _rollouts(tmp_path: Path, server: dict[str, Any] | None) -> Path:
    root = tmp_path / "runs"
    shutil.copytree(BUILTIN, root / BUILTIN.name)
    shutil.copytree(REPO / "data" / "rollouts" / "clean_pass", root / "clean_pass")
    if server is not None:
        result = root / BUILTIN.name / "result.json"
        result.write_text(json.dumps({**json.loads(result.read_text()), "server": server}))
    return root


def _tools(out: Path, fmt: str) -> dict[str, Any]:
    table = pq.read_table(next((out / fmt / "data").glob("*.parquet")))
    return {r["rollout_id"]: r["tools"] for r in table.to_pylist()}


def test_an_unknown_rendering_leaves_the_rollout_out_of_both_formats(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = export([_rollouts(tmp_path, None)], out, ExportOptions(formats=BOTH))
    assert summary.left_out == {f: {"unrenderable_tool": 1} for f in BOTH}
    rows = {
        json.loads(line)["rollout_id"]: json.loads(line) for line in open(out / "results.jsonl")
    }
    assert rows[BUILTIN.name]["training_ready"]  # results.jsonl carries it as recorded
    assert {t["type"] for t in rows[BUILTIN.name]["tools"]} == {
        "function",
        "web_search",
        "namespace",
    }
    for fmt in BOTH:
        assert set(_tools(out, fmt)) == {"clean_pass"}
    assert validate(out / "results.jsonl").ok


def test_the_cli_table_counts_each_format_and_what_it_left_out(tmp_path: Path) -> None:
    """One line per format written, with the kinds it left out beneath it."""
    args = ["export", str(_rollouts(tmp_path, None)), "--out", str(tmp_path / "out")]
    proc = cli(*args, "--format", "trl", "--format", "prime-sft", env={"COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip("│ ") for line in proc.stderr.splitlines() if "│" in line]
    labels = [line.split("│")[0].strip() for line in lines]
    at = labels.index("prime-sft: conversation branches")
    assert labels[at : at + 4] == [
        "prime-sft: conversation branches",
        "left out: unrenderable_tool",
        "trl: conversation branches",
        "left out: unrenderable_tool",
    ]
    assert labels[at - 1] == "rollouts written"


def test_on_vllm_the_formats_hold_the_flattened_functions(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = export([_rollouts(tmp_path, VLLM)], out, ExportOptions(formats=BOTH))
    assert summary.left_out == {}
    tools = json.loads(_tools(out, "prime-sft")[BUILTIN.name])
    assert [t["function"]["name"] for t in tools] == [
        "terminal",
        "file_editor",
        "finish",
        "multi_agent__spawn_agent",
    ]
    assert tools[-1]["function"]["parameters"] == EMPTY
    assert json.loads(_tools(out, "trl")[BUILTIN.name]) == tools
    assert validate(out / "results.jsonl").ok


def _rewrite(out: Path, fmt: str, change: Any) -> None:
    shard = next((out / fmt / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    records = change(table.to_pylist())
    batch = rows_to_batch(records, FORMATS[fmt].schema)
    pq.write_table(
        type(table).from_batches([batch]).replace_schema_metadata(table.schema.metadata), shard
    )


@pytest.mark.parametrize("fmt", BOTH)
def test_validate_catches_tools_not_as_rendered_and_a_wrong_left_out_set(
    tmp_path: Path, fmt: str
) -> None:
    runs = _rollouts(tmp_path, VLLM)
    out = tmp_path / "out"
    export([runs], out, ExportOptions(formats=BOTH))
    recorded = json.loads((out / "results.jsonl").read_text().splitlines()[0])

    def recorded_tools(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for r in records:
            if r["rollout_id"] == BUILTIN.name:
                r["tools"] = json.dumps(recorded["tools"])  # JSON text in both (Arrow storage)
        return records

    original = pq.read_table(next((out / fmt / "data").glob("*.parquet"))).to_pylist()
    _rewrite(out, fmt, recorded_tools)
    report = validate(out / "results.jsonl")
    assert any("tools differs" in v.reason for v in report.violations), report.violations

    # Export again without the server: the rollout is left out; putting its records back
    # (what a guessed tool list would give) is a violation, and so is a wrong count.
    (runs / BUILTIN.name / "result.json").write_text((BUILTIN / "result.json").read_text())
    export([runs], out, ExportOptions(formats=BOTH))
    assert validate(out / "results.jsonl").ok
    kept = [r for r in original if r["rollout_id"] == BUILTIN.name]
    _rewrite(out, fmt, lambda records: records + kept)
    report = validate(out / "results.jsonl")
    assert any("left out (unrenderable_tool" in v.reason for v in report.violations)
    _rewrite(out, fmt, lambda records: [r for r in records if r["rollout_id"] != BUILTIN.name])
    assert validate(out / "results.jsonl").ok
    summary_path = out / "export-summary.json"
    summary = json.loads(summary_path.read_text())
    summary["left_out"][fmt] = {}
    summary_path.write_text(json.dumps(summary))
    report = validate(out / "results.jsonl")
    assert any(
        "the rule leaves out {'unrenderable_tool': 1}" in v.reason for v in report.violations
    )


def test_a_call_of_a_namespace_function_keeps_the_name_the_model_produced() -> None:
    from contagent.wire.responses import chat_response

    call = {"type": "function_call", "call_id": "c1", "arguments": "{}"}
    response, unknown = chat_response(
        {"status": "completed", "output": [{**call, "name": "spawn", "namespace": "multi_agent"}]}
    )
    assert not unknown
    (tool_call,) = response["choices"][0]["message"]["tool_calls"]
    assert tool_call["function"]["name"] == "multi_agent__spawn"
    plain, _ = chat_response({"status": "completed", "output": [{**call, "name": "terminal"}]})
    assert plain["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "terminal"


def test_the_names_a_model_may_call_include_flattened_namespace_functions() -> None:
    ns = {
        "type": "namespace",
        "name": "multi_agent",
        "tools": [{"type": "function", "name": "spawn"}, {"type": "custom", "name": "x"}],
    }
    assert rules.callable_names([fn("terminal"), ns, {"type": "web_search"}]) == {
        "terminal",
        "multi_agent__spawn",
    }


def test_a_namespace_call_is_a_known_tool_and_trains_under_its_flattened_name(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    rid = builtin_tools_on_vllm(runs).name
    out = tmp_path / "out"
    export([runs], out, ExportOptions(formats=BOTH))
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["rollout_id"] == rid)
    assert row["training_ready"], row["training_ready_reason"]
    table = pq.read_table(next((out / "prime-sft" / "data").glob("*.parquet"))).to_pylist()
    record = next(r for r in table if r["rollout_id"] == rid)
    called = [c["function"]["name"] for m in record["messages"] for c in m["tool_calls"] or ()]
    assert "multi_agent__spawn_agent" in called
    assert "multi_agent__spawn_agent" in [
        t["function"]["name"] for t in json.loads(record["tools"])
    ]
    assert validate(out / "results.jsonl").ok
