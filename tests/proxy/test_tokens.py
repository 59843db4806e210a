"""Token capture: what the proxy adds upstream, records, and hides from the client."""

from __future__ import annotations

import random

import httpx
import orjson
import pytest

from contagent.errors import ContagentError
from contagent.proxy.addons.token_addon import TokenWatch
from contagent.proxy.identify import plan_tokens
from contagent.proxy.sse import SSEParser
from contagent.proxy.stream_state import StreamState
from contagent.proxy.tokens import TokenAsk, TokenCollector, ask_for_tokens
from contagent.testing import stub_tokens
from contagent.testing.llm_stub import (
    Reply,
    StubRequest,
    ToolCall,
    completion_json,
    stream_payloads,
)
from contagent.wire.stream_fold import StreamAssembler
from tests.proxy.helpers import exchanges

MSGS = [{"role": "user", "content": "hi"}]
ADDED = ["return_token_ids", "logprobs", "top_logprobs"]
CALL = Reply(
    content=None, tool_calls=[ToolCall("terminal", {"command": "ls"})], reasoning_content="hm"
)


def _post(proxy, body: dict, rollout: str = "r1") -> httpx.Response:
    url = proxy.rollout_base_url(rollout) + "/chat/completions"
    return httpx.post(url, json={"model": "m", "messages": MSGS, **body}, timeout=20)


def _events(resp: httpx.Response) -> list[dict]:
    parser = SSEParser()
    return [orjson.loads(p) for p in parser.feed(resp.content) if p != "[DONE]"]


def _expected_tokens(body: dict, reply: Reply, stream: bool) -> dict:
    req = StubRequest(0, "POST", "/v1/chat/completions", {}, b"", body)
    if stream:
        collector = TokenCollector()
        for p in stream_payloads(req, reply, "x")[:-1]:
            collector.feed(orjson.loads(p))
        return collector.result() or {}
    collector = TokenCollector()
    collector.feed(completion_json(req, reply, "x"))
    return collector.result() or {}


@pytest.mark.parametrize("stream", [False, True])
def test_tokens_are_asked_for_recorded_and_hidden(stub_factory, proxy_factory, tmp_path, stream):
    stub = stub_factory([CALL])
    proxy = proxy_factory(stub.url, tokens=True, server={"name": "vllm", "version": "0.32.0"})
    resp = _post(proxy, {"stream": stream})
    assert resp.status_code == 200
    sent = stub.requests[0].json
    assert [sent[k] for k in ADDED] == [True, True, 0]
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["upstream_changes"][-3:] == ADDED
    assert req["server"] == {"name": "vllm", "version": "0.32.0"}
    want = _expected_tokens({"messages": MSGS, **dict.fromkeys(ADDED[:2], True)}, CALL, stream)
    assert out["tokens"] == want
    [choice] = want["choices"]
    assert len(choice["token_ids"]) == len(choice["logprobs"]) == out["usage"]["completion_tokens"]
    assert choice["token_ids"][-1] == stub_tokens.EOS
    assert len(want["prompt_token_ids"]) == out["usage"]["prompt_tokens"]
    if stream:  # the record keeps what the upstream sent; the client gets none of it
        recorded = [orjson.loads(e) for e in out["stream_events"][:-1]]
        assert recorded[0]["prompt_token_ids"] == want["prompt_token_ids"]
        got = _events(resp)
        assert len(got) == len(recorded)
        assert all(e.get("prompt_token_ids") is None for e in got)
        for e in got:
            for c in e["choices"]:
                assert c.get("token_ids") is None and c.get("logprobs") is None
        ask = TokenAsk(tuple(ADDED))
        for e in recorded:  # the same events otherwise
            ask.strip(e)
        assert got == recorded
    else:
        body = resp.json()
        assert body["prompt_token_ids"] is None
        assert body["choices"][0]["token_ids"] is None and body["choices"][0]["logprobs"] is None
        assert out["response"]["prompt_token_ids"] == want["prompt_token_ids"]
        assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "terminal"


def test_the_client_gets_what_vllm_sends_unasked(stub_factory, proxy_factory):
    """Stripped, the client's body equals the one the server sends when not asked."""
    stub = stub_factory([CALL, CALL])
    plain = httpx.post(stub.url + "/v1/chat/completions", json={"model": "m", "messages": MSGS})
    proxy = proxy_factory(stub.url, tokens=True)
    got = _post(proxy, {}).json()
    want = plain.json()
    for body in (got, want):  # what differs between any two answers of the stub
        body.pop("id"), body.pop("created"), body.pop("usage")
        body["choices"][0]["message"]["tool_calls"][0].pop("id")
    assert got == want


def test_logprobs_the_client_asked_for_pass_through(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([CALL, CALL])
    proxy = proxy_factory(stub.url, tokens=True)
    body = _post(proxy, {"logprobs": True}).json()
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["upstream_changes"] == ["return_token_ids", "top_logprobs"]
    content = body["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in content] == out["tokens"]["choices"][0]["logprobs"]
    assert body["choices"][0]["token_ids"] is None and body["prompt_token_ids"] is None
    # all three set by the client: nothing added, nothing taken out
    body = _post(proxy, {"logprobs": True, "top_logprobs": 0, "return_token_ids": True}).json()
    (req, out) = exchanges(tmp_path / "records", "r1")[1]
    assert req["upstream_changes"] == [] and req["body"]["return_token_ids"] is True
    assert body["choices"][0]["token_ids"] == out["tokens"]["choices"][0]["token_ids"]
    assert body["prompt_token_ids"] == out["tokens"]["prompt_token_ids"]


def test_a_client_that_says_no_keeps_its_no(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([CALL])
    proxy = proxy_factory(stub.url, tokens=True)
    _post(proxy, {"logprobs": False})
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert stub.requests[0].json["logprobs"] is False
    assert req["upstream_changes"] == ["return_token_ids", "top_logprobs"]
    assert out["tokens"]["choices"][0]["logprobs"] is None
    assert out["tokens"]["choices"][0]["token_ids"]


def test_tokens_off_adds_nothing_and_records_none(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([CALL, CALL])
    proxy = proxy_factory(stub.url)
    _post(proxy, {})
    _post(proxy, {"stream": True})
    pairs = exchanges(tmp_path / "records", "r1")
    assert [r["upstream_changes"] for r, _ in pairs] == [[], ["stream_options.include_usage"]]
    assert [o["tokens"] for _, o in pairs] == [None, None]
    assert all(k not in stub.requests[0].json for k in ADDED)
    assert [r["server"] for r, _ in pairs] == [None, None]


def test_only_chat_completions_are_asked(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(), Reply()])
    proxy = proxy_factory(stub.url, tokens=True)
    url = proxy.rollout_base_url("r1") + "/completions"
    httpx.post(url, json={"model": "m", "prompt": "hi"}, timeout=20)
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["upstream_changes"] == [] and out["tokens"] is None


def test_ask_for_tokens_leaves_the_clients_body_alone():
    body = {"model": "m", "top_logprobs": 2}
    changed, ask = ask_for_tokens(body)
    assert body == {"model": "m", "top_logprobs": 2}
    assert changed == {"model": "m", "top_logprobs": 2, "return_token_ids": True, "logprobs": True}
    assert ask.added == ("return_token_ids", "logprobs")
    same, none = ask_for_tokens(changed)
    assert same is changed and none.added == ()


def test_choices_are_collected_per_index():
    """n > 1: each choice's ids and logprobs, concatenated over the chunks in index order."""
    collector = TokenCollector()
    collector.feed({"choices": [{"index": 0, "delta": {}}], "prompt_token_ids": [1, 2]})
    for idx, tok in ((1, 7), (0, 5), (1, 8), (0, 6)):
        lp = {"content": [{"token": "x", "logprob": -tok / 10}]}
        collector.feed({"choices": [{"index": idx, "token_ids": [tok], "logprobs": lp}]})
    collector.feed({"choices": [], "usage": {"completion_tokens": 4}})
    assert collector.result() == {
        "prompt_token_ids": [1, 2],
        "choices": [
            {"index": 0, "token_ids": [5, 6], "logprobs": [-0.5, -0.6]},
            {"index": 1, "token_ids": [7, 8], "logprobs": [-0.7, -0.8]},
        ],
    }


def test_a_logprob_that_is_no_number_is_recorded_as_none():
    """Numbers are kept as sent (an int too); anything else, or an entry that is no
    object, is None in its place, so positions still line up with the token ids."""
    entries = [{"logprob": -0.5}, {"logprob": 0}, {"logprob": True}, {"logprob": "-1"}, {}, 7]
    collector = TokenCollector()
    collector.feed({"choices": [{"index": 0, "token_ids": [1, 2, 3, 4, 5, 6],
                                 "logprobs": {"content": entries}}]})  # fmt: skip
    result = collector.result()
    assert result is not None
    assert result["choices"][0]["logprobs"] == [-0.5, 0, None, None, None, None]
    collector = TokenCollector()
    collector.feed({"choices": [{"token_ids": [1], "logprobs": {"content": [{"logprob": -0.25}]}}]})
    assert (collector.result() or {})["choices"][0]["logprobs"] == [-0.25]


@pytest.mark.parametrize("seed", range(20))
def test_relay_is_the_same_however_the_bytes_are_cut(seed):
    """The client's bytes and the tokens do not depend on where the upstream's reads end."""
    req = StubRequest(0, "POST", "/v1/chat/completions", {}, b"",
                      {"messages": MSGS, "return_token_ids": True, "logprobs": True,
                       "stream_options": {"include_usage": True}})  # fmt: skip
    wire = b"".join(b"data: " + p.encode() + b"\n\n" for p in stream_payloads(req, CALL, "x"))
    ask = TokenAsk(("return_token_ids", "logprobs"))

    def relay(cuts: list[int]) -> tuple[bytes, dict | None, list[str], dict | None]:
        state = StreamState(TokenWatch(ask))
        out, last = [], 0
        for cut in [*cuts, len(wire)]:
            out.append(state.relay(wire[last:cut]))
            last = cut
        out.append(state.close()[0])
        fields = state.fields()[0]
        return b"".join(out), fields["tokens"], state.events, fields["response"]

    whole = relay([])
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(wire)), rng.randint(1, 40)))
    assert relay(cuts) == whole
    assert b'token_ids":[' not in whole[0] and b'prompt_token_ids":[' not in whole[0]
    assert whole[1]["choices"][0]["token_ids"][-1] == stub_tokens.EOS
    asm = StreamAssembler()  # the record's completion, as without token capture
    asm.feed_many(whole[2])
    assert whole[3] == asm.result() and whole[3]["choices"][0]["message"]["tool_calls"]


def test_tokens_mode_follows_the_upstream(stub_factory):
    vllm = stub_factory([])
    plan = plan_tokens("auto", vllm.url + "/v1")
    assert plan.record and plan.server is not None
    assert plan.server["name"] == "vllm" and plan.server["version"] == "0.32.0"
    assert plan.server["logprobs_mode"] == "raw_logprobs"
    assert "recorded" in plan.line
    off = plan_tokens("off", vllm.url)
    assert not off.record and off.server == {
        "name": "vllm", "version": "0.32.0", "logprobs_mode": None,
        "logprobs_mode_how": "not probed: --tokens off",
    }  # fmt: skip
    from contagent.testing.llm_stub import start_stub_in_thread

    other = start_stub_in_thread([], owned_by="openai")
    try:
        auto = plan_tokens("auto", other.url)
        assert not auto.record and auto.server is None and "not vLLM" in auto.line
        with pytest.raises(ContagentError, match=r"^--tokens on: the upstream is not vLLM"):
            plan_tokens("on", other.url)
    finally:
        other.stop()
    with pytest.raises(ContagentError, match="use one of auto, on, off"):
        plan_tokens("maybe", vllm.url)


def test_the_proxy_command_says_whether_tokens_are_recorded(stub_factory, tmp_path):
    import subprocess
    import sys

    from contagent.testing.llm_stub import start_stub_in_thread

    vllm = stub_factory([])
    cmd = [sys.executable, "-m", "contagent", "proxy", "--record-dir", str(tmp_path)]
    proc = subprocess.Popen([*cmd, "--upstream", vllm.url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("contagent proxy listening on ")
        lines = [proc.stderr.readline().strip() for _ in range(1)]
        assert lines == [
            "tokens: recorded on chat, messages (via chat), responses (via chat) "
            "(the upstream is vLLM 0.32.0)"
        ]
    finally:
        proc.terminate()
        proc.wait(30)
    other = start_stub_in_thread([], owned_by="openai")
    try:
        done = subprocess.run([*cmd, "--upstream", other.url, "--tokens", "on"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        other.stop()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "contagent: error: --tokens on: the upstream is not vLLM: "
        "its models are owned by openai, not vllm"
    ]
