"""What each constraint kind does to the logprobs vLLM 0.32 reports, measured in both
logprobs modes, against the rule that marks ``constrained``.

Each kind is one seeded request through a recording proxy into the tier's raw server and
into its processed one. A token is *measured* constrained when the logprob the server
reported differs from the model's own (a transformers recompute of the same weights at the
step's temperature) by more than :data:`GAP`; the rule (:mod:`contagent.rules.sampling`, as
the export applies it) marks the step, its tool-call spans, or nothing. They must agree:
no marked range without a measured token in it, no measured token outside the marking.

Measured with the tiny model (mean |difference| per token): a grammar shapes what both modes
report, since vLLM masks the logits before it computes either (named and ``required``
``tool_choice``, ``response_format``, ``structured_outputs``; strict tools under ``auto``
from ``<tool_call>`` on, free text before it untouched); ``logit_bias`` shows in
``processed_logprobs`` only; ``guided_json`` is ignored.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.rawlog import reward as reward_file
from contagent.rules.sampling import constrained_ranges, constraint, sampled_texts, step_sampling
from tests.vllm import trainer
from tests.vllm.conversations import TOOLS, Chat, Meta, start
from tests.vllm.replay import settled
from tests.vllm.trainer import GAP

pytestmark = pytest.mark.vllm

STOP = ["\n", ")", ".", "_"]
_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def _loose() -> list[dict[str, Any]]:
    tools = copy.deepcopy(TOOLS)
    for tool in tools:
        tool["function"].pop("strict", None)
    return tools


def _cases(meta: Meta) -> dict[str, dict[str, Any]]:
    """Each constraint kind as a request's arguments (no logit bias unless it is the kind)."""
    vocab = json.loads((meta.model_dir / "tokenizer.json").read_text())
    open_tag = next(a["id"] for a in vocab["added_tokens"] if a["content"] == "<tool_call>")
    free = {"end_bias": None, "stop": STOP, "max_tokens": 24}
    return {
        "named": {"tool": "terminal", "max_tokens": 40, "logit_bias": None},
        "required": {"required": True, "max_tokens": 40, "logit_bias": None},
        "strict_auto_free_text": free,
        # the bias opens a call (raw mode reports the model's own logprob of the tag)
        "strict_auto_call": {"end_bias": None, "max_tokens": 40, "logit_bias": {open_tag: 100}},
        "response_format": {
            "end_bias": None, "max_tokens": 30, "tools": _loose(),
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": _SCHEMA}},
        },
        "structured_outputs": {
            "end_bias": None, "max_tokens": 12, "tools": _loose(),
            "structured_outputs": {"regex": "[a-z]{4,10}"},
        },
        "logit_bias": {**free, "tools": _loose(), "logit_bias": {i: 3.0 for i in range(100, 400)}},
        "guided_json": {**free, "tools": _loose(), "guided_json": _SCHEMA},
    }  # fmt: skip


def _step(record_dir: Path, rid: str) -> tuple[str, list[tuple[int, int]], list[int], Any]:
    """(the rule's constraint, its marked ranges, the prompt ids, the sampled choice)."""
    raw = settled(record_dir / rid / "exchanges.jsonl")
    (index,) = raw.outcomes
    request, outcome = raw.requests[index], raw.outcomes[index]
    kind = constraint(request["body"], step_sampling(request))
    choice = outcome["tokens"]["choices"][0]
    message = outcome["response"]["choices"][0]["message"]
    ranges = constrained_ranges(
        kind, sampled_texts(outcome), len(choice["token_ids"]), bool(message.get("tool_calls"))
    )
    return kind, list(ranges), outcome["tokens"]["prompt_token_ids"], choice


@pytest.fixture(scope="module", params=["raw_logprobs", "processed_logprobs"])
def measured(request: pytest.FixtureRequest, meta: Meta, record_dir: Path) -> dict[str, Any]:
    """Per constraint kind: (the rule's kind, its marked ranges, the per-token gaps)."""
    mode = request.param
    proxy = request.getfixturevalue("proxy" if mode == "raw_logprobs" else "processed_proxy")
    steps = {}
    for name, kwargs in _cases(meta).items():
        rid = f"constraint_{mode}_{name}"
        chat = Chat(proxy.rollout_base_url(rid), meta, seed=7, temperature=1.0)
        chat.ask(start(), **kwargs)
        steps[name] = _step(record_dir, rid)
    seqs = [(p + c["token_ids"], list(range(len(p), len(p) + len(c["token_ids"])))) for _, _, p, c in steps.values()]  # fmt: skip
    got = trainer.recompute(meta.model_dir, seqs)
    out = {}
    for (name, (kind, ranges, _, choice)), values in zip(steps.items(), got, strict=True):
        gaps = [abs(a - b) for a, b in zip(choice["logprobs"], values, strict=True)]
        out[name] = (kind, ranges, gaps)
        shown = " ".join(f"{g:.2f}" for g in gaps)
        print(f"{mode} {name}: rule {kind} {ranges}; gaps {shown}")
    return {"mode": mode, **out}


#: the rule's constraint per kind and mode, as the measurement must confirm it
RULE = {
    "named": ("step", "step"),
    "required": ("step", "step"),
    "strict_auto_free_text": ("tool_call", "tool_call"),
    "strict_auto_call": ("tool_call", "step"),  # processed: the opening bias shows too
    "response_format": ("step", "step"),
    "structured_outputs": ("step", "step"),
    "logit_bias": ("none", "step"),
    "guided_json": ("none", "none"),
}


@pytest.mark.parametrize("name", list(RULE))
def test_constrained_is_what_the_server_shaped(measured: dict[str, Any], name: str) -> None:
    mode = measured["mode"]
    kind, ranges, gaps = measured[name]
    assert kind == RULE[name][mode == "processed_logprobs"]
    marked = [any(lo <= i < hi for lo, hi in ranges) for i in range(len(gaps))]
    outside = [g for g, m in zip(gaps, marked, strict=True) if not m]
    assert all(g < GAP for g in outside), f"a token shaped outside the marking: {gaps}"
    for lo, hi in ranges:
        assert max(gaps[lo:hi]) > GAP, f"marked [{lo}, {hi}) but nothing there was shaped"
    if name == "strict_auto_free_text":
        assert gaps and not ranges  # free text under strict tools: nothing marked, trainable
    if name == "strict_auto_call":
        assert ranges == [(0, len(gaps))]  # the call runs to the cut, from its tag


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_temperatures_hold_the_sampling_temperature(
    mode: str, request: pytest.FixtureRequest, meta: Meta, record_dir: Path, tmp_path: Path
) -> None:
    """A free answer at temperature 0.7: the tokens format's ``temperatures`` is 0.7, and
    the processed mode reports the logprobs at 0.7, the raw mode the model's at 1."""
    proxy = request.getfixturevalue("proxy" if mode == "raw_logprobs" else "processed_proxy")
    rid = f"temperature_{mode}"
    chat = Chat(proxy.rollout_base_url(rid), meta, seed=11, temperature=0.7)
    chat.ask(start(), end_bias=None, stop=STOP, max_tokens=24)
    settled(record_dir / rid / "exchanges.jsonl")
    runs = tmp_path / "runs"
    shutil.copytree(record_dir / rid, runs / rid)
    reward_file.write_reward(runs / rid, reward_file.RewardPost(rollout_id=rid, reward=1.0))
    options = ExportOptions(formats=("tokens",), filter="all", allow_raw_logprobs=True)
    export([runs], tmp_path / "out", options)
    (rec,) = pq.read_table(tmp_path / "out" / "tokens" / "data").to_pylist()
    assert {round(t, 6) for t in rec["temperatures"]} == {0.7}
    positions = [p for p, m in enumerate(rec["mask"]) if m]
    assert positions
    seq = [(rec["token_ids"], positions)] * 2
    at_07, at_1 = trainer.recompute(meta.model_dir, seq, [0.7, 1.0])
    recorded = [rec["logprobs"][p] for p in positions]
    mean = {
        t: sum(abs(a - b) for a, b in zip(recorded, v, strict=True)) / len(v)
        for t, v in ((0.7, at_07), (1.0, at_1))
    }
    print(f"{mode}: mean |recorded - recompute| at 0.7 {mean[0.7]:.3f}, at 1 {mean[1.0]:.3f}")
    want, other = (0.7, 1.0) if mode == "processed_logprobs" else (1.0, 0.7)
    assert mean[want] < 0.1 < mean[other]
