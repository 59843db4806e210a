"""The tokens format on rollouts recorded against a real vLLM, checked as a trainer would.

Conversations run through a recording proxy with token capture on into the tier's
server; ``export --format tokens`` must then give samples whose masked tokens are the
server's, with its logprobs, that a transformers recompute of the same weights agrees
with (bf16 serving against an fp32 recompute: about 0.03 mean), while reading the
recompute one position off disagrees by far (about 3 with the peaked tiny model).
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.rawlog.read import read_exchanges
from contagent.validate.check import validate
from tests.helpers import read_rows
from tests.vllm.replay import settled

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        os.environ.get("CONTAGENT_VLLM_TESTS") != "1", reason="CONTAGENT_VLLM_TESTS=1 not set"
    ),
]

#: tolerances around the measured figures (0.026 mean and 3.1 with one position off)
AGREE_MAX = 0.1
SHIFTED_MIN = 1.0


def _loose_tools() -> list[dict[str, Any]]:
    """The tier's tools without ``strict``, so that free answers are unconstrained."""
    from tests.vllm.conversations import TOOLS

    tools = copy.deepcopy(TOOLS)
    for tool in tools:
        tool["function"].pop("strict", None)
    return tools


def _prefix_kept(chat: Any) -> bool:
    """trl's prefix-keeping template, thinking off, free answers: one multi-step sample."""
    from tests.vllm.conversations import history_message, start

    chat.template = chat.meta.training_template
    history = start()
    for n, stream in enumerate((False, True, False)):
        turn = chat.ask(history, stream=stream, end_bias=10.0, tools=_loose_tools())
        history.append(history_message(turn))
        if n < 2:
            history.append({"role": "user", "content": "Go on."})
    return True


def _forced_then_free(chat: Any) -> bool:
    """Qwen3's own template: a forced call (constrained), then a free answer; prefix breaks."""
    from tests.vllm.conversations import answer_calls, start

    history = start()
    turn = chat.ask(history, tool="terminal", max_tokens=100)
    answer_calls(history, turn, "hunter2")
    chat.ask(history, end_bias=10.0, tools=_loose_tools())
    return True


def _forked(chat: Any) -> bool:
    """A critic forks off the first step under the prefix-keeping template."""
    from tests.vllm.conversations import history_message, start

    chat.template = chat.meta.training_template
    history = start()
    turn = chat.ask(history, end_bias=10.0, tools=_loose_tools())
    history.append(history_message(turn))
    history.append({"role": "user", "content": "Go on."})
    critic = [*history, {"role": "user", "content": "Critic: on track?"}]
    chat.ask(critic, end_bias=10.0, tools=_loose_tools())
    chat.ask(history, end_bias=10.0, tools=_loose_tools(), stream=True)
    return True


SCENARIOS = {"prefix_kept": _prefix_kept, "forced_then_free": _forced_then_free, "forked": _forked}


def _mode_stated(log: Path) -> None:
    """The tier's server runs vLLM's default ``raw_logprobs`` mode: say so in request records
    of a proxy that does not record the mode itself."""
    import orjson

    lines = []
    for line in log.read_bytes().splitlines():
        rec = orjson.loads(line)
        server = rec.get("server")
        if rec.get("type") == "request" and isinstance(server, dict):
            server.setdefault("logprobs_mode", "raw_logprobs")
        lines.append(orjson.dumps(rec))
    log.write_bytes(b"\n".join(lines) + b"\n")


@pytest.fixture(scope="module")
def recorded(meta: Any, proxy: Any, record_dir: Path) -> Iterator[tuple[Path, Path]]:
    """(the tier's model, a folder of this module's rollouts, recorded through the session's
    proxy into the session's real server)."""
    from contagent.layout import RolloutPaths
    from contagent.rawlog.result import RolloutResult
    from tests.vllm.conversations import MODEL, Chat

    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        for name, scenario in SCENARIOS.items():
            rid = f"export_{name}"
            chat = Chat(proxy.rollout_base_url(rid), meta)
            chat.temperature = 1.0
            passed = scenario(chat)
            result = RolloutResult(
                rollout_id=rid, experiment="tokens-vllm", model=MODEL,
                status="passed", passed=passed, reward=1.0, stop_condition="finished",
            )  # fmt: skip
            paths = RolloutPaths.for_rollout(record_dir, rid)
            settled(paths.exchanges)
            paths.result.write_text(result.model_dump_json() + "\n")
            shutil.copytree(paths.root, runs / rid)
            _mode_stated(runs / rid / "exchanges.jsonl")
        yield meta.model_dir, runs


def _exported(runs: Path, out: Path) -> tuple[dict[str, dict], list[dict]]:
    # every request biases the end token: in the raw mode that leaves the reported logprobs
    # the model's own (what the recompute checks), so the samples are taken as they are
    options = ExportOptions(formats=("tokens",), filter="all", allow_raw_logprobs=True)
    export([runs], out, options)
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    return rows, pq.read_table(out / "tokens" / "data").to_pylist()


def test_samples_are_the_servers_tokens_and_validate_is_healthy(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    _, runs = recorded
    rows, records = _exported(runs, tmp_path / "out")
    report = validate(tmp_path / "out" / "results.jsonl")
    assert report.ok, report.violations
    for name in SCENARIOS:
        assert rows[f"export_{name}"]["tokens"]["kinds"] == [], rows[f"export_{name}"]["tokens"]
    # the prefix-keeping template gives samples over several steps (a partial UTF-8 token
    # the server re-renders as U+FFFD can still break it, which the row then shows)
    kept = [r for r in records if r["rollout_id"] == "export_prefix_kept"]
    assert max(r["num_steps"] for r in kept) >= 2
    assert len(kept) == 1 + len(rows["export_prefix_kept"]["tokens"]["breaks"])
    # Qwen3's own template re-renders the call: the prefix breaks, one sample per step
    assert rows["export_forced_then_free"]["tokens"]["samples"] == [2]
    assert len(rows["export_forced_then_free"]["tokens"]["breaks"]) == 1
    # the critic's sample starts with the step it shares, trained only on the main line
    assert rows["export_forked"]["tokens"]["samples"] == [1, 1]
    for rec in records:
        raw = read_exchanges(runs / rec["rollout_id"] / "exchanges.jsonl")
        recorded_steps = [
            (o["tokens"]["prompt_token_ids"], o["tokens"]["choices"][0])
            for o in raw.outcomes.values()
            if o.get("tokens") and o["tokens"]["choices"]
        ]
        last = next(
            p + c["token_ids"] for p, c in recorded_steps if p + c["token_ids"] == rec["token_ids"]
        )
        assert last == rec["token_ids"]
        for prompt, choice in recorded_steps:
            end = len(prompt) + len(choice["token_ids"])
            if rec["mask"][len(prompt) : end] == [True] * len(choice["token_ids"]):
                got = rec["logprobs"][len(prompt) : end]
                assert got == pytest.approx(choice["logprobs"], abs=1e-6)


def test_masked_logprobs_match_a_transformers_recompute(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    from tests.vllm.trainer import recompute

    model, runs = recorded
    _, records = _exported(runs, tmp_path / "out")
    seqs, wanted = [], []
    for rec in records:
        positions = [
            p
            for p, (m, c) in enumerate(zip(rec["mask"], rec["constrained"], strict=True))
            if m and not c and p > 0
        ]
        seqs.append((rec["token_ids"], positions))
        wanted.append([rec["logprobs"][p] for p in positions])
    got = recompute(model, seqs)
    same = [abs(a - b) for w, g in zip(wanted, got, strict=True) for a, b in zip(w, g, strict=True)]
    assert len(same) >= 20, "too few masked, unconstrained tokens to compare"
    mean = sum(same) / len(same)
    print(f"recorded vs recompute: mean |diff| {mean:.3f} over {len(same)} tokens")
    assert mean < AGREE_MAX
    # the same comparison one position off: a shifted token would be caught
    shifted = [(ids, [p - 1 for p in pos if p > 1]) for ids, pos in seqs]
    off_got = recompute(model, shifted)
    off = [
        abs(a - b)
        for w, g in zip(wanted, off_got, strict=True)
        for a, b in zip(w[-len(g) :] if g else [], g, strict=True)
    ]
    print(f"one position off: mean |diff| {sum(off) / max(1, len(off)):.3f}")
    assert off and sum(off) / len(off) > SHIFTED_MIN
