"""What the proxy records is what the exporter and the validator accept (the log contract, end to end)."""

from __future__ import annotations

import json
import subprocess
import sys

import orjson

from contagent.rawlog.result import RolloutResult
from contagent.testing.llm_stub import Error, Reply, ToolCall
from tests.proxy.helpers import client, exchanges

CLI = [sys.executable, "-c", "from contagent.cli import main; main()"]
TOOLS = [
    {"type": "function", "function": {"name": "terminal", "description": "Run a command.",
     "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {"name": "finish", "description": "Finish.",
     "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}}},
]  # fmt: skip


def _text(s: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": s}]


def _assistant(msg) -> dict:
    out = {"role": "assistant", "content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": t.id,
                "type": "function",
                "function": {"name": t.function.name, "arguments": t.function.arguments},
            }
            for t in msg.tool_calls
        ]
    return out


def test_proxy_records_export_and_validate(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([
        Error(503, {"error": {"message": "overloaded"}}),            # 0: retried by the client
        Reply(content=None, tool_calls=[ToolCall("terminal", {"command": "cat secret.txt"}, id="call_1")]),  # 1
        Reply(content=None, tool_calls=[ToolCall("finish", {"message": "done"}, id="call_2")], chunks=4),  # 2: streamed
    ])  # fmt: skip
    proxy = proxy_factory(stub.url)
    c = client(proxy, "agent-run-1", max_retries=1)
    messages = [
        {"role": "system", "content": _text("You are an agent.")},
        {"role": "user", "content": _text("Read the secret.")},
    ]
    first = c.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    messages += [_assistant(first.choices[0].message),
                 {"role": "tool", "tool_call_id": "call_1", "name": "terminal", "content": _text("s3cr3t")}]  # fmt: skip
    stream = c.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True)
    final_calls = [
        tc for chunk in stream for ch in chunk.choices for tc in (ch.delta.tool_calls or [])
    ]
    assert final_calls[0].function.name == "finish"

    rollout = tmp_path / "records" / "agent-run-1"
    result = RolloutResult(rollout_id="agent-run-1", model="m", experiment="proxy-e2e", status="passed",
                           passed=True, reward=1.0, stop_condition="finished")  # fmt: skip
    (rollout / "result.json").write_text(result.model_dump_json())
    proxy.stop()
    assert [o["outcome"] for _, o in exchanges(tmp_path / "records", "agent-run-1")] == [
        "http_error",
        "completed",
        "completed",
    ]

    out = tmp_path / "out"
    exp = subprocess.run([*CLI, "export", str(tmp_path / "records"), "--out", str(out), "--filter", "all"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert exp.returncode == 0, exp.stderr
    [row] = [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]
    assert row["rollout_id"] == "agent-run-1"
    assert row["training_ready"] is True, row["training_ready_reason"]
    assert [s["exchange_index"] for s in row["steps"]] == [1, 2]
    assert [(e["exchange_index"], e["reason"]) for e in row["excluded"]] == [(0, "http_error")]
    assert sorted(t["function"]["name"] for t in row["tools"]) == ["finish", "terminal"]

    val = subprocess.run(
        [*CLI, "validate", str(out / "results.jsonl"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert val.returncode == 0, val.stdout + val.stderr
    report = json.loads(val.stdout)
    assert report["violations"] == [] and report["rows"] == 1 and report["training_ready"] == 1
    assert report["parquet_rows"] >= 1


def test_faults_and_abandons_export_as_not_ready_or_excluded(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory(
        [
            Reply(content="x" * 40, chunks=40, chunk_delay=0.05),
            Reply(content="cut", finish_reason="length"),
        ]
    )
    proxy = proxy_factory(stub.url)
    c = client(proxy, "faulty")
    msgs = [{"role": "user", "content": _text("go")}]
    s = c.chat.completions.create(model="m", messages=msgs, stream=True)
    next(iter(s))
    s.close()  # abandoned
    c.chat.completions.create(
        model="m", messages=msgs
    )  # length: incomplete, and the last thing that happened
    proxy.stop()
    out = tmp_path / "out"
    exp = subprocess.run([*CLI, "export", str(tmp_path / "records"), "--out", str(out), "--format", "results"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert exp.returncode == 0, exp.stderr
    [row] = [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]
    reasons = dict((e["exchange_index"], e["reason"]) for e in row["excluded"])
    assert reasons.get(0) == "abandoned"
    indices = sorted([s["exchange_index"] for s in row["steps"]] + list(reasons))
    assert indices == [0, 1], "every recorded exchange is accounted for exactly once"
    val = subprocess.run(
        [*CLI, "validate", str(out / "results.jsonl")], capture_output=True, text=True, timeout=120
    )
    assert val.returncode == 0, val.stdout + val.stderr
