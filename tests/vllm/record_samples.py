"""Re-record ``data/rollouts/tokens/`` from a real vLLM: ``python -m tests.vllm.record_samples``.

Starts the tier's server in the logprobs mode RL needs (``processed_logprobs``, and the
render route, so the proxy learns the server's default sampling), or takes ``--url`` of one
already serving the tiny model so. Each rollout runs through a recording proxy with token
capture on and ``--sampling-defaults temperature=0.8``:

- each scenario of :mod:`tests.vllm.conversations` (the token shapes, the client sending
  temperature 1), an experiment of its own, with a ``result.json`` as ``contagent run``
  writes it;
- ``free_text``, three attempts at one experiment: two answers in free text under strict
  tools and ``auto`` with no logit bias, each ended by a stop string (trainable as sampled);
- ``model_mistake``: the model calls a tool the request does not offer (``unknown_tool``),
  steered there by ``structured_outputs``, since a random model makes no chosen mistake;
- ``proxy_only``, two attempts recorded by the proxy alone (no ``result.json``): a harness
  posts each reward and its group to the proxy's control route (``reward.json``).

A random model solves nothing, so a scripted grader gives the reward: the share of the last
answer's characters that are ASCII letters. Requests carry seeds, so a re-recording on the
same packages gives the same tokens. Run from the repository root with the project's venv::

    scripts/ci-vllm.sh --install-only
    CONTAGENT_VLLM_PYTHON=... CONTAGENT_VLLM_MODEL=... .venv/bin/python -m tests.vllm.record_samples
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import string
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from contagent._loopthread import LoopThread
from contagent.layout import RolloutPaths
from contagent.proxy import start_proxy_in_thread
from contagent.proxy.identify import plan_tokens
from contagent.proxy.reward_route import RewardRoute
from contagent.proxy.sampling_options import SamplingPolicy
from contagent.rawlog.result import RolloutResult
from tests.vllm import server as vllm_server
from tests.vllm.conversations import (
    MODEL,
    SCENARIOS,
    TOOLS,
    Chat,
    Meta,
    answer_calls,
    history_message,
    start,
)

#: rollout ids carry this prefix: unique beside data/rollouts' others
PREFIX = "tokens_"
#: what the proxy fills in where a request left it to the server
SAMPLING_DEFAULTS = {"temperature": 0.8}
#: the tool the model is steered to call: the requests never offer it
UNKNOWN_TOOL = "search"
#: where a free answer ends (4 at most, as the API takes): stop strings end an answer without
#: touching the distribution (one cut by ``max_tokens`` would be an incomplete step, left out)
STOP = ["\n", ")", ".", "_"]


def free_answer(chat: Chat, history: list[dict[str, Any]], **extra: Any) -> None:
    """An answer in free text under ``auto``, with no logit bias: its tokens are the model's
    own, at the step's temperature."""
    turn = chat.ask(history, end_bias=None, max_tokens=48, stop=STOP, **extra)
    assert turn.finish_reason == "stop", turn.response


def grade(chat: Chat) -> float:
    """The scripted grader: the share of the last answer's characters that are ASCII letters."""
    text = chat.turns[-1].message.get("content") or ""
    return round(sum(c in string.ascii_letters for c in text) / max(1, len(text)), 3)


def free_text(chat: Chat) -> float:
    """Two answers in free text under the strict tools, the user asking for more between
    them: every step trainable."""
    history = start()
    free_answer(chat, history)
    history.append(history_message(chat.turns[-1]))
    history.append({"role": "user", "content": "Go on."})
    free_answer(chat, history)
    return grade(chat)


def _loose(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` without ``strict``: vLLM 0.32 lets strict tools' grammar win over
    ``structured_outputs`` under ``auto``."""
    loose = copy.deepcopy(tools)
    for tool in loose:
        tool["function"].pop("strict", None)
    return loose


def model_mistake(chat: Chat) -> float:
    """The model calls ``search``, a tool the request does not offer (steered there by
    ``structured_outputs``); the harness answers with an error, and the model answers
    freely (the same tools throughout: tools that change within a branch are a conflict).
    The attempt failed."""
    history = start()
    call = (
        r'<tool_call>\n\{"name": "' + UNKNOWN_TOOL + r'", "arguments": '
        r'\{"query": "[a-z]{1,8}"\}\}\n</tool_call>'
    )
    turn = chat.ask(
        history, end_bias=None, max_tokens=48, tools=_loose(TOOLS),
        structured_outputs={"regex": call},
    )  # fmt: skip
    assert turn.message.get("tool_calls"), turn.message
    answer_calls(history, turn, f"error: no tool named {UNKNOWN_TOOL}")
    free_answer(chat, history, tools=_loose(TOOLS))
    return 0.0


def _result(
    name: str, experiment: str, reward: float, plan_server: dict | None, repeat: int, started: float
) -> RolloutResult:
    ended = time.time()
    passed = reward == 1.0
    return RolloutResult(
        rollout_id=name, experiment=experiment, model=MODEL,
        status="passed" if passed else "failed", passed=passed, reward=reward,
        stop_condition="finished", started=started, ended=ended, duration_s=ended - started,
        run_id="tokens-samples", repeat_index=repeat, agent="scripted", server=plan_server,
    )  # fmt: skip


def _shape(chat: Chat, play: Callable[[Chat], bool]) -> float:
    """A token-shape scenario as the tier's tests play it: the client sends temperature 1."""
    chat.temperature = 1.0
    return 1.0 if play(chat) else 0.0


Run = tuple[str, str | None, int, int, Callable[[Chat], float]]


def _runs() -> list[Run]:
    """(rollout id; its experiment, or None for the proxy alone; repeat; seed; what it
    plays)."""
    runs: list[Run] = []
    for name, play in SCENARIOS.items():
        runs.append((PREFIX + name, PREFIX + name, 0, 0, lambda c, p=play: _shape(c, p)))
    for n in range(3):
        rid = PREFIX + "free_text" + (f"_r{n}" if n else "")
        runs.append((rid, PREFIX + "free_text", n, 1000 * n, free_text))
    runs.append((PREFIX + "model_mistake", PREFIX + "model_mistake", 0, 0, model_mistake))
    for n, letter in enumerate("ab"):
        runs.append((PREFIX + "proxy_only_" + letter, None, n, 1000 * (3 + n), free_text))
    return runs


def record(url: str, meta: Meta, out: Path, only: list[str] | None = None) -> list[Path]:
    """Record the rollouts (``only``: those whose id ends with one of these) under ``out``."""
    plan = plan_tokens("on", url)
    assert plan.server is not None and plan.server["logprobs_mode"] == "processed_logprobs"
    sampling = SamplingPolicy(defaults=SAMPLING_DEFAULTS).learnt(plan.server, plan.sampling)
    runs = [r for r in _runs() if not only or any(r[0].endswith(o) for o in only)]
    loop = LoopThread("reward-route")
    with tempfile.TemporaryDirectory() as tmp:
        route = RewardRoute(Path(tmp))
        loop.call(route.start())
        try:
            with start_proxy_in_thread(
                url, Path(tmp), tokens=True, server=plan.server, sampling=sampling
            ) as proxy:
                for name, experiment, repeat, seed, play in runs:
                    chat = Chat(proxy.rollout_base_url(name), meta, seed=seed)
                    started = time.time()
                    reward = play(chat)
                    paths = RolloutPaths.for_rollout(Path(tmp), name)
                    if experiment is None:  # the proxy alone: the harness posts the reward
                        post = {"rollout_id": name, "reward": reward, "group": "proxy_only"}
                        httpx.post(route.url, json=post, timeout=30).raise_for_status()
                        continue
                    result = _result(name, experiment, reward, plan.server, repeat, started)
                    paths.result.write_text(result.model_dump_json(indent=2) + "\n")
        finally:
            loop.call(route.stop())
            loop.close()
        written = []
        for name, *_ in runs:
            dest = out / name
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(RolloutPaths.for_rollout(Path(tmp), name).root, dest)
            written.append(dest)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(prog="record_samples")
    parser.add_argument("out", nargs="?", type=Path, default=Path("data/rollouts/tokens"))
    parser.add_argument("--url", help="a vLLM serving the tiny model with processed logprobs")
    parser.add_argument("--only", action="append", help="record the rollouts ending so")
    args = parser.parse_args()
    model = Path(os.environ["CONTAGENT_VLLM_MODEL"])
    meta = Meta.load(model)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.url:
        paths = record(args.url, meta, args.out, args.only)
    else:
        log = Path(tempfile.gettempdir()) / "vllm-record.log"
        with vllm_server.serving(model, log, *vllm_server.PROCESSED) as srv:
            paths = record(srv.url, meta, args.out, args.only)
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
