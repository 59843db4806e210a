"""Token capture against a real vLLM: the proxy records what the server sampled, exactly,
and the agent sees the response it asked for.

Each scenario of :mod:`tests.vllm.conversations` runs once through the recording
proxy; every recorded exchange is then asked of vLLM directly (seeded, no prefix
cache: it samples the same) and compared, and the tokens are checked against a
transformers recompute of the same weights.
"""

from __future__ import annotations

import copy
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from contagent.proxy.tokens import ADDITIONS
from tests.vllm import trainer
from tests.vllm.conversations import MODEL, SCENARIOS, Chat, Meta, Turn, start

pytestmark = pytest.mark.vllm


def _log(record_dir: Path, rollout: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    recs = [orjson.loads(line) for line in (record_dir / rollout / "exchanges.jsonl").open("rb")]
    outs = {r["index"]: r for r in recs if r["type"] == "outcome"}
    return [(r, outs[r["index"]]) for r in recs if r["type"] == "request"]


def _direct(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The same request asked of vLLM itself, JSON, with the token fields."""
    ask = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    ask.update({k: v for k, v in ADDITIONS if k not in body})
    resp = httpx.post(url + "/v1/chat/completions", json=ask, timeout=600)
    resp.raise_for_status()
    return resp.json()


@pytest.fixture(scope="module")
def rollouts(proxy, meta: Meta) -> dict[str, Chat]:
    done = {}
    for name, scenario in SCENARIOS.items():
        chat = Chat(proxy.rollout_base_url(name), meta)
        scenario(chat)
        done[name] = chat
    return done


def _client_saw_no_token_data(turn: Turn) -> None:
    if turn.events is None:
        body = turn.response
        assert body["prompt_token_ids"] is None
        for choice in body["choices"]:
            assert choice["token_ids"] is None and choice["logprobs"] is None
        return
    for payload in turn.events:
        if payload == "[DONE]":
            continue
        event = orjson.loads(payload)
        assert event.get("prompt_token_ids") is None
        for choice in event["choices"]:
            assert choice.get("token_ids") is None and choice.get("logprobs") is None


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_recorded_tokens_are_what_vllm_sampled(name, rollouts, record_dir, vllm):
    chat = rollouts[name]
    pairs = _log(record_dir, name)
    assert len(pairs) == len(chat.turns)
    for (req, out), turn in zip(pairs, chat.turns, strict=True):
        server = req["server"]
        assert (server["name"], server["version"]) == ("vllm", "0.32.0")
        assert server["logprobs_mode"] == "raw_logprobs"  # the tier's server runs the default
        assert req["upstream_changes"][-3:] == [k for k, _ in ADDITIONS]
        assert req["body"] == turn.body  # the record keeps what the client sent
        _client_saw_no_token_data(turn)
        tokens = out["tokens"]
        [choice] = tokens["choices"]
        usage = out["usage"]
        assert len(tokens["prompt_token_ids"]) == usage["prompt_tokens"]
        assert len(choice["token_ids"]) == len(choice["logprobs"]) == usage["completion_tokens"]
        direct = _direct(vllm.url, turn.body)
        assert tokens["prompt_token_ids"] == direct["prompt_token_ids"]
        assert choice["token_ids"] == direct["choices"][0]["token_ids"]
        want = [e["logprob"] for e in direct["choices"][0]["logprobs"]["content"]]
        assert choice["logprobs"] == pytest.approx(want, abs=1e-4)
        # the recorded response is what vLLM sent, token data included
        if req["stream"]:
            first = orjson.loads(out["stream_events"][0])
            assert first["prompt_token_ids"] == tokens["prompt_token_ids"]
        else:
            assert out["response"]["choices"][0]["token_ids"] == choice["token_ids"]


def _steps(record_dir: Path, name: str) -> list[tuple[list[int], list[int]]]:
    out = []
    for _, o in _log(record_dir, name):
        t = o["tokens"]
        out.append((t["prompt_token_ids"], t["choices"][0]["token_ids"]))
    return out


def _extends(step: tuple[list[int], list[int]], after: tuple[list[int], list[int]]) -> bool:
    prev = step[0] + step[1]
    return after[0][: len(prev)] == prev


def test_the_training_template_keeps_the_prefix_and_qwen3s_breaks_it(rollouts, record_dir):
    kept = _steps(record_dir, "prefix_kept")
    assert len(kept) == 3
    assert all(_extends(a, b) for a, b in itertools.pairwise(kept))
    broken = _steps(record_dir, "default_template")
    assert not _extends(broken[0], broken[1])


def test_cut_turns_reasoning_and_parallel_calls_are_recorded(rollouts, record_dir, meta):
    cut = _log(record_dir, "length_cut")[0][1]
    assert cut["finish_reasons"] == ["length"] and cut["outcome"] == "incomplete"
    assert meta.eos not in cut["tokens"]["choices"][0]["token_ids"]  # never generated
    ended = _log(record_dir, "length_cut")[1][1]
    assert ended["tokens"]["choices"][0]["token_ids"][-1] == meta.eos
    turn = rollouts["streamed_reasoning"].turns[0]
    assert turn.message.get("reasoning_content"), "thinking on: the answer is reasoning"
    calls = rollouts["parallel_calls"].turns[0].message["tool_calls"]
    assert len(calls) >= 2
    side = _log(record_dir, "side_call")
    assert not _extends(_steps(record_dir, "side_call")[1], _steps(record_dir, "side_call")[2])
    assert len(side) == 3


def test_n_choices_and_the_clients_own_logprobs(proxy, vllm, record_dir):
    body = {
        "model": MODEL, "messages": start(), "n": 2, "max_tokens": 6, "seed": 7,
        "logprobs": True, "chat_template_kwargs": {"enable_thinking": False},
    }  # fmt: skip
    for stream in (False, True):
        rollout = f"n2_{stream}"
        got = Chat(proxy.rollout_base_url(rollout), None)._send({**body, "stream": stream})  # type: ignore[arg-type]
        [(req, out)] = _log(record_dir, rollout)
        assert req["upstream_changes"][-2:] == ["return_token_ids", "top_logprobs"]
        direct = _direct(vllm.url, body)
        assert [c["index"] for c in out["tokens"]["choices"]] == [0, 1]
        for mine, theirs in zip(out["tokens"]["choices"], direct["choices"], strict=True):
            assert mine["token_ids"] == theirs["token_ids"]
            assert mine["logprobs"] == pytest.approx(
                [e["logprob"] for e in theirs["logprobs"]["content"]], abs=1e-4
            )
        if not stream:  # the logprobs the client asked for reach it unchanged
            assert got.response["choices"][1]["logprobs"] == copy.deepcopy(
                out["response"]["choices"][1]["logprobs"]
            )
            assert got.response["choices"][1]["token_ids"] is None


def test_the_trainers_view_matches_the_recorded_logprobs(rollouts, record_dir, meta):
    """transformers on the same weights gives the recorded logprobs back where the model
    sampled freely (no tool_choice grammar), and reading one position off does not."""
    steps = []
    for name, chat in rollouts.items():
        for (_, out), turn in zip(_log(record_dir, name), chat.turns, strict=True):
            if "tool_choice" in turn.body:
                continue  # a grammar's mask: the logprobs are the constrained ones
            t = out["tokens"]
            c = t["choices"][0]
            steps.append((t["prompt_token_ids"], c["token_ids"], c["logprobs"]))
    assert sum(len(s[1]) for s in steps) >= 20
    same, shifted = trainer.gaps(meta.model_dir, steps)
    print(
        f"trainer's view: mean |recorded - recomputed| {same:.4f}, one position off {shifted:.2f}"
    )
    assert same < 0.1
    assert shifted > 1.0


def test_the_proxy_command_finds_vllm(vllm, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "contagent", "proxy", "--upstream", vllm.url, "--record-dir",
         str(tmp_path), "--tokens", "on"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("contagent proxy listening on ")
        line = ""
        for _ in range(20):  # log lines may come first
            line = proc.stderr.readline().strip()
            if line.startswith("tokens:") or not line:
                break
        assert line == (
            "tokens: recorded on chat, messages (via chat), responses (via chat) "
            "(the upstream is vLLM 0.32.0)"
        )
    finally:
        proc.terminate()
        proc.wait(30)
