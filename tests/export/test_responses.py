"""The Responses-API mapping: input/output items to chat shape, so that every chat rule applies."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent import rules
from contagent.testing.llm_stub import Reply, StubRequest, ToolCall
from contagent.testing.responses_moves import response_events, response_json
from contagent.wire.chat import usage_counts
from contagent.wire.responses import chat_response, input_messages, normalise_exchanges
from contagent.wire.stream_fold import StreamAssembler
from tests.helpers import REPO, assert_outcome, assert_same_as_generated, export_and_validate
from tools.responses_samples import expectations, write_responses_samples


def _req(body: dict[str, Any]) -> StubRequest:
    return StubRequest(0, "POST", "/v1/responses", {}, orjson.dumps(body), body)


def test_input_items_become_chat_messages() -> None:
    items = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "rules"}],
        },
        {"role": "user", "content": "do it"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call", "call_id": "c2", "name": "sh", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "b"}],
        },
    ]
    messages, unknown = input_messages(items)
    assert unknown == []
    assert messages == [
        {"role": "developer", "content": [{"type": "text", "text": "rules"}]},
        {"role": "user", "content": "do it"},
        {
            "role": "assistant",
            "content": "ok",
            "reasoning_content": "think",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "sh", "arguments": '{"cmd":"ls"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "sh", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "c2", "content": "b"},
    ]
    assert input_messages("hi") == ([{"role": "user", "content": "hi"}], [])
    _, unknown = input_messages([{"type": "web_search_call", "id": "ws"}])
    assert unknown == ["web_search_call"]


def test_output_items_become_one_assistant_message_with_status_and_usage() -> None:
    reply = Reply(
        content="hm", reasoning_content="why", tool_calls=[ToolCall("sh", {"cmd": "ls"}, id="c9")]
    )
    done = response_json(_req({"model": "m"}), reply, "resp_1")
    chat, unknown = chat_response(done)
    assert unknown == []
    [choice] = chat["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["reasoning_content"] == "why" and choice["message"]["content"] == "hm"
    assert (
        choice["message"]["tool_calls"][0]["id"] == "c9"
    )  # the call_id, as the next input names it
    assert rules.completeness(200, chat) == (True, None)
    assert usage_counts(chat["usage"]) == {
        "prompt_tokens": done["usage"]["input_tokens"],
        "completion_tokens": done["usage"]["output_tokens"],
        "total_tokens": done["usage"]["total_tokens"],
    }
    cut, _ = chat_response(response_json(_req({}), Reply(content="x", finish_reason="length"), "r"))
    assert cut["choices"][0]["finish_reason"] == "length"
    assert rules.completeness(200, cut)[0] is False  # status incomplete, incomplete_details set
    failed, _ = chat_response({"status": "failed", "output": []})
    assert rules.completeness(200, failed)[0] is False


def test_streamed_response_is_the_completed_event_s_response() -> None:
    """What the proxy keeps of a stream (the response.completed event) maps like the JSON answer."""
    req = _req({"model": "m", "stream": True})
    reply = Reply(content="done", tool_calls=[ToolCall("sh", {"cmd": "ls"}, id="c1")], chunks=4)
    asm = StreamAssembler()
    for _, payload in response_events(req, reply, "resp_s"):
        asm.feed(payload)
    assembled = asm.result()
    assert assembled == response_json(req, reply, "resp_s") | {
        "created_at": assembled["created_at"]
    }
    assert chat_response(assembled)[0]["choices"][0]["message"]["tool_calls"][0]["id"] == "c1"
    cut = response_events(req, Reply(content="x", finish_reason="length"), "r")
    assert cut[-1][0] == "response.incomplete"


def _exchange(index: int, body: dict[str, Any], response: dict[str, Any]) -> tuple[dict, dict]:
    req = {
        "type": "request",
        "index": index,
        "method": "POST",
        "path": "/v1/responses",
        "body": body,
    }
    out = {
        "type": "outcome",
        "index": index,
        "outcome": "completed",
        "status": 200,
        "response": response,
    }
    return req, out


def test_previous_response_id_chain_resolved_from_the_log() -> None:
    call = Reply(content=None, tool_calls=[ToolCall("sh", "{}", id="c1")])
    r0 = response_json(_req({}), call, "resp_0")
    r1 = response_json(_req({}), Reply(content="bye"), "resp_1")
    req0, out0 = _exchange(0, {"model": "m", "instructions": "be brief", "input": "hi"}, r0)
    body1 = {
        "model": "m",
        "instructions": "be brief",
        "previous_response_id": "resp_0",
        "input": [{"type": "function_call_output", "call_id": "c1", "output": "ok"}],
    }
    req1, out1 = _exchange(1, body1, r1)
    requests, outcomes = {0: req0, 1: req1}, {0: out0, 1: out1}
    assert normalise_exchanges(requests, outcomes) == []
    first, second = requests[0]["body"]["messages"], requests[1]["body"]["messages"]
    assert first == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assistant = outcomes[0]["response"]["choices"][0]["message"]
    assert second == [*first, assistant, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert rules.extends(first, assistant, second)  # the chain is one branch, consumed by call_id

    req1, out1 = _exchange(1, {**body1, "previous_response_id": "resp_elsewhere"}, r1)
    problems = normalise_exchanges({1: req1}, {1: out1})
    assert problems == [
        (
            "responses_chain",
            "request 1: previous_response_id 'resp_elsewhere' is not in this raw log",
        )
    ]


def test_tools_kept_and_unioned_by_type_and_name() -> None:
    fn = {"type": "function", "name": "sh", "parameters": {"type": "object"}}
    ns = {"type": "namespace", "name": "agents", "tools": [fn]}
    req, out = _exchange(
        0, {"model": "m", "input": "x", "tools": [fn, ns, {"type": "web_search"}]}, {}
    )
    normalise_exchanges({0: req}, {0: out})
    tools = req["body"]["tools"]
    assert tools[0] == {
        "type": "function",
        "function": {"name": "sh", "parameters": {"type": "object"}},
    }
    assert tools[1:] == [ns, {"type": "web_search"}]
    union, conflicts = rules.tool_union([tools, tools])
    assert union == tools and conflicts == []
    other = {**ns, "description": "changed"}
    assert rules.tool_union([tools, [other]])[1] == ["namespace:agents"]


def test_a_stream_that_carried_only_an_error_is_read_without_choices() -> None:
    """What the proxy records when the server fails mid-request (a real vLLM whose engine
    died sent one error event, no response): the reader keeps it as a completion without
    choices, and a later request pointing at it is a broken chain, not a crash."""
    error = {"type": "error", "code": None, "message": "EngineCore failed", "param": None}
    asm = StreamAssembler()
    asm.feed_many([orjson.dumps({**error, "sequence_number": 0}).decode()])
    assert asm.result()["choices"] == []
    req0, out0 = _exchange(0, {"model": "m", "input": "x"}, asm.result())
    req1, out1 = _exchange(1, {"model": "m", "input": "y", "previous_response_id": "r"}, {})
    problems = normalise_exchanges({0: req0, 1: req1}, {0: out0, 1: out1})
    assert out0["response"]["choices"] == []
    assert problems == [
        ("responses_chain", "request 1: previous_response_id 'r' is not in this raw log")
    ]


def test_unknown_output_items_fail_closed() -> None:
    response = {"status": "completed", "output": [{"type": "web_search_call", "id": "ws_1"}]}
    req, out = _exchange(0, {"model": "m", "input": "x"}, response)
    problems = normalise_exchanges({0: req}, {0: out})
    assert problems == [
        ("unsupported_item", "response 0: output items not mapped: web_search_call")
    ]
    assert out["response"]["choices"][0]["message"]["unmapped_items"] == response["output"]


def test_committed_responses_samples_match_their_generator(tmp_path: Path) -> None:
    write_responses_samples(tmp_path)
    assert_same_as_generated(
        REPO / "data" / "rollouts" / "responses",
        tmp_path,
        list(expectations()),
        "python -m tools.responses_samples data/rollouts/responses",
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("responses")
    write_responses_samples(root)
    return export_and_validate(root)


@pytest.mark.parametrize("name", list(expectations()))
def test_responses_sample_outcome(name: str, exported: dict[str, dict]) -> None:
    """Each chat rule, on the Responses path: the same outcome as its chat twin."""
    assert_outcome(exported[name], expectations()[name])


def test_builtin_tools_are_in_the_row(exported: dict[str, dict]) -> None:
    kinds = Counter(t.get("type") for t in exported["responses_builtin_tools"]["tools"])
    assert kinds == {"function": 3, "web_search": 1, "namespace": 1}
