"""Responses-API exchanges through the recording proxy (JSON and streamed) export and validate."""

from __future__ import annotations

from contagent.rawlog.read import parse_exchanges
from contagent.rawlog.result import RolloutResult
from contagent.testing.llm_stub import Reply, ToolCall
from tests.proxy.helpers import client, exchanges, export_one_and_validate


def test_real_client_through_the_proxy_json_and_streamed(stub_factory, proxy_factory, tmp_path):
    """The openai client's Responses calls, recorded by the proxy, export and validate."""
    stub = stub_factory(
        [
            Reply(content=None, tool_calls=[ToolCall("sh", {"cmd": "cat f"}, id="call_1")]),
            Reply(content="the answer is 42", reasoning_content="read it", chunks=5),
        ]
    )
    proxy = proxy_factory(stub.url)
    c = client(proxy, "resp-run")
    tools = [{"type": "function", "name": "sh", "parameters": {"type": "object"}}]
    first = c.responses.create(model="m", instructions="agent", input="read f", tools=tools)
    [fc] = [i for i in first.output if i.type == "function_call"]
    follow = [
        {"role": "user", "content": "read f"},
        {
            "type": "function_call",
            "call_id": fc.call_id,
            "name": fc.name,
            "arguments": fc.arguments,
        },
        {"type": "function_call_output", "call_id": fc.call_id, "output": "42"},
    ]
    stream = c.responses.create(
        model="m", instructions="agent", input=follow, tools=tools, stream=True
    )
    assert [e.type for e in stream][-1] == "response.completed"
    assert stub.requests[1].json["input"][-1]["output"] == "42"
    rollout = tmp_path / "records" / "resp-run"
    result = RolloutResult(rollout_id="resp-run", model="m", status="passed", passed=True,
                           reward=1.0, stop_condition="finished")  # fmt: skip
    (rollout / "result.json").write_text(result.model_dump_json())
    proxy.stop()
    assert [o["outcome"] for _, o in exchanges(tmp_path / "records", "resp-run")] == [
        "completed"
    ] * 2
    raw = parse_exchanges(rollout / "exchanges.jsonl", (rollout / "exchanges.jsonl").read_bytes())
    assert raw.problems == [] and all(raw.usage(i) for i in raw.indices)

    row = export_one_and_validate(tmp_path / "records", tmp_path / "out")
    assert row["training_ready"] is True, row["training_ready_reason"]
    assert [s["extends"] for s in row["steps"]] == [None, 0]
    assert row["steps"][1]["response"]["reasoning_content"] == "read it"
    assert row["steps"][1]["response"]["content"] == "the answer is 42"
