"""Messages-API exchanges through the recording proxy (JSON and streamed) export and validate."""

from __future__ import annotations

import json
import subprocess
import sys

import anthropic

from contagent.rawlog import parse_exchanges
from contagent.records import RolloutResult
from contagent.testing.llm_stub import Reply, ToolCall
from tests.conftest import read_rows
from tests.proxy.conftest import CLIENT_KEY, exchanges

CLI = [sys.executable, "-c", "from contagent.cli import main; main()"]
CACHE = {"type": "ephemeral"}


def test_real_client_through_the_proxy_json_and_streamed(stub_factory, proxy_factory, tmp_path):
    """The anthropic client's calls as Claude Code makes them, recorded by the proxy: the
    streamed answer is recorded as the whole message, and the rollout exports and validates."""
    stub = stub_factory(
        [
            Reply(content=None, tool_calls=[ToolCall("Bash", {"command": "cat f"}, id="toolu_1")]),
            Reply(content="the answer is 42", reasoning_content="read it", chunks=5),
        ]
    )
    proxy = proxy_factory(stub.url)
    base = proxy.rollout_base_url("msg-run").removesuffix("/v1")  # the client adds /v1 itself
    c = anthropic.Anthropic(base_url=base, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    tools = [{"name": "Bash", "description": "sh", "input_schema": {"type": "object"}}]
    system = [{"type": "text", "text": "You are an agent.", "cache_control": CACHE}]
    task = {"role": "user", "content": [{"type": "text", "text": "read f", "cache_control": CACHE}]}
    first = c.messages.create(
        model="m", max_tokens=100, system=system, messages=[task], tools=tools
    )
    [use] = [b for b in first.content if b.type == "tool_use"]
    follow = [
        {"role": "user", "content": [{"type": "text", "text": "read f"}]},  # the marker moved on
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "42", "is_error": False,
                 "cache_control": CACHE},
            ],
        },
    ]  # fmt: skip
    with c.messages.stream(
        model="m", max_tokens=100, system=system, messages=follow, tools=tools
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.content[-1].text == "the answer is 42"
    assert stub.requests[1].json["messages"][-1]["content"][0]["content"] == "42"
    rollout = tmp_path / "records" / "msg-run"
    result = RolloutResult(rollout_id="msg-run", model="m", status="passed", passed=True,
                           reward=1.0, stop_condition="finished")  # fmt: skip
    (rollout / "result.json").write_text(result.model_dump_json())
    proxy.stop()
    records = exchanges(tmp_path / "records", "msg-run")
    assert [o["outcome"] for _, o in records] == ["completed"] * 2
    streamed = records[1][1]["response"]
    assert streamed["type"] == "message" and streamed["stop_reason"] == "end_turn"
    assert [b["type"] for b in streamed["content"]] == ["thinking", "text"]
    raw = parse_exchanges(rollout / "exchanges.jsonl", (rollout / "exchanges.jsonl").read_bytes())
    assert raw.problems == [] and all(raw.usage(i) for i in raw.indices)

    out = tmp_path / "out"
    exp = subprocess.run([*CLI, "export", str(tmp_path / "records"), "--out", str(out), "--filter", "all"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert exp.returncode == 0, exp.stderr
    [row] = read_rows(out / "results.jsonl")
    assert row["training_ready"] is True, row["training_ready_reason"]
    assert [s["extends"] for s in row["steps"]] == [None, 0]
    assert row["steps"][1]["messages"][-1] == {
        "role": "tool", "tool_call_id": "toolu_1", "content": "42", "is_error": False
    }  # fmt: skip
    assert row["steps"][1]["response"]["reasoning_content"] == "read it"
    val = subprocess.run([*CLI, "validate", str(out / "results.jsonl"), "--json"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert val.returncode == 0 and json.loads(val.stdout)["violations"] == [], val.stdout
