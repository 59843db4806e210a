"""The stub's token data has the shapes vLLM's has (data/rollouts/tokens was recorded from a
real vLLM 0.32), and raw logs of the previous schema version still read."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.rawlog.records import SCHEMA_VERSION
from contagent.testing.llm_stub import (
    Reply,
    StubRequest,
    ToolCall,
    completion_json,
    stream_payloads,
)
from tests.helpers import REPO, read_rows

RECORDED = REPO / "data" / "rollouts" / "tokens"
ENTRY_KEYS = ["token", "logprob", "bytes", "top_logprobs"]


def check_json(body: dict[str, Any], eos: int) -> None:
    """A completion asked for token data, as vLLM returns it."""
    assert all(type(i) is int for i in body["prompt_token_ids"])
    assert len(body["prompt_token_ids"]) == body["usage"]["prompt_tokens"]
    for choice in body["choices"]:
        ids, entries = choice["token_ids"], choice["logprobs"]["content"]
        assert len(ids) == len(entries) == body["usage"]["completion_tokens"]
        assert all(list(e) == ENTRY_KEYS and e["top_logprobs"] == [] for e in entries)
        # a stop string ends the answer on the token that spelled it, named in stop_reason
        ended = choice["finish_reason"] in ("stop", "tool_calls") and not choice.get("stop_reason")
        assert (ids[-1] == eos) == ended


def check_stream(payloads: list[str], eos: int) -> None:
    """A stream asked for token data, as vLLM sends it: prompt ids in the first chunk only,
    each later chunk's own ids and logprob entries (also under an empty delta), and a usage
    chunk without choices."""
    assert payloads[-1] == "[DONE]"
    events = [orjson.loads(p) for p in payloads[:-1]]
    first, *middle, usage = events
    assert all(type(i) is int for i in first["prompt_token_ids"])
    assert "token_ids" not in first["choices"][0] and first["choices"][0]["logprobs"] is None
    assert usage["choices"] == [] and "prompt_token_ids" not in usage
    ids: list[int] = []
    for e in middle:
        assert "prompt_token_ids" not in e
        [choice] = e["choices"]
        entries = choice["logprobs"]["content"]
        assert len(choice["token_ids"]) == len(entries) >= 1
        assert all(list(x) == ENTRY_KEYS for x in entries)
        ids += choice["token_ids"]
    assert len(ids) == usage["usage"]["completion_tokens"]
    assert len(first["prompt_token_ids"]) == usage["usage"]["prompt_tokens"]
    last = middle[-1]["choices"][0]
    assert (ids[-1] == eos) == (last["finish_reason"] in ("stop", "tool_calls"))
    if ids[-1] == eos:  # ``<|im_end|>`` comes in a chunk of its own, its delta empty
        assert last["delta"] == {} and last["token_ids"] == [eos]


def _recorded() -> list[dict[str, Any]]:
    outs = []
    for log in sorted(RECORDED.glob("*/exchanges.jsonl")):
        outs += [
            r for r in map(orjson.loads, log.read_bytes().splitlines()) if r["type"] == "outcome"
        ]
    return outs


def test_the_recorded_vllm_answers_have_the_shapes():
    outs = _recorded()
    assert {o["finish_reasons"][0] for o in outs} >= {"stop", "length", "tool_calls"}
    streamed = [o for o in outs if o["stream_events"]]
    assert streamed and len(streamed) < len(outs)
    for out in outs:
        if out["stream_events"]:
            check_stream(out["stream_events"], eos=2)
        else:
            check_json(out["response"], eos=2)


@pytest.mark.parametrize(
    "reply",
    [
        Reply(content="Let me look.", tool_calls=[ToolCall("terminal", {"command": "ls"}),
                                                  ToolCall("terminal", {"command": "pwd"})]),
        Reply(content=None, reasoning_content="First, the file.",
              tool_calls=[ToolCall("terminal", {"command": "cat x"})]),
        Reply(content="cut sho", finish_reason="length"),
    ],
)  # fmt: skip
def test_the_stub_answers_in_the_same_shapes(reply):
    from contagent.testing.stub_tokens import EOS

    body = {"messages": [{"role": "user", "content": "hi"}], "return_token_ids": True,
            "logprobs": True, "top_logprobs": 0, "stream_options": {"include_usage": True}}  # fmt: skip
    req = StubRequest(0, "POST", "/v1/chat/completions", {}, b"", body)
    check_json(completion_json(req, reply, "x"), EOS)
    check_stream(stream_payloads(req, reply, "x"), EOS)
    plain = StubRequest(0, "POST", "/v1/chat/completions", {}, b"", {"messages": body["messages"]})
    unasked = completion_json(plain, reply, "x")  # not asked: the keys are there, null
    assert unasked["prompt_token_ids"] is None
    assert unasked["choices"][0]["token_ids"] is None and unasked["choices"][0]["logprobs"] is None


def _downgrade(folder: Path) -> None:
    """Rewrite a rollout as the first schema version wrote it."""
    log = folder / "exchanges.jsonl"
    lines = []
    for rec in map(orjson.loads, log.read_bytes().splitlines()):
        rec.pop("server", None), rec.pop("tokens", None), rec.pop("sampling", None)
        lines.append(orjson.dumps({**rec, "schema_version": 1}))
    log.write_bytes(b"\n".join(lines) + b"\n")
    result = orjson.loads((folder / "result.json").read_bytes())
    result.pop("server", None)
    (folder / "result.json").write_bytes(orjson.dumps({**result, "schema_version": 1}))


def test_logs_of_the_previous_schema_version_still_read(tmp_path):
    assert SCHEMA_VERSION >= 2  # version 1 logs (no server, no tokens) read as they did
    for name in ("new", "old"):
        shutil.copytree(REPO / "data" / "rollouts" / "clean_pass", tmp_path / name / "clean_pass")
    _downgrade(tmp_path / "old" / "clean_pass")
    rows = {}
    for name in ("new", "old"):
        export([tmp_path / name], tmp_path / f"out-{name}", ExportOptions(filter="all"))
        [row] = read_rows(tmp_path / f"out-{name}" / "results.jsonl")
        row.pop("raw_log")
        rows[name] = row
    assert rows["old"] == rows["new"]
