"""The engine on a real vLLM with its dev-mode endpoints (the tier's server runs with
``VLLM_SERVER_DEV_MODE=1``): the server's own ``weight_version`` is the policy version,
and a pause pauses the server too, in ``wait`` mode, resumed after.

Rollouts are the in-process stand-in's (real recording proxies), answered by vLLM with at
most 4 tokens a step (``--sampling-override max_tokens=4``) to keep the CPU build quick.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from contagent.engine import Engine, EngineConfig, Group
from contagent.engine.server_control import ServerControl
from contagent.export.exporter import ExportOptions
from contagent.proxy.sampling_options import SamplingPolicy
from contagent.rawlog.policy_journal import read_policy_journal
from contagent.rawlog.read import read_exchanges
from contagent.runner.config import LlmOptions, RunConfig
from contagent.testing.inprocess import InProcessExecutor
from tests.runner.helpers import write_experiment
from tests.vllm.server import SERVED_NAME, VllmServer

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        os.environ.get("CONTAGENT_VLLM_TESTS") != "1", reason="CONTAGENT_VLLM_TESTS=1 not set"
    ),
]


def versions_of(logs: Path, group: Group) -> set[tuple[int, int]]:
    out = set()
    for outcome in group.rollouts:
        raw = read_exchanges(logs / "rollouts" / outcome.rollout_id / "exchanges.jsonl.zst")
        out |= {
            (raw.requests[i]["policy_version"], raw.outcomes[i]["policy_version"])
            for i in raw.requests
        }
    return out


def server_paused(url: str) -> bool:
    """The server's own word on its pause (the engine never asks: it pauses and resumes)."""
    with urllib.request.urlopen(f"{url}/is_paused", timeout=10) as answer:
        return bool(json.loads(answer.read())["is_paused"])


def engine_on_server_versions(url: str, tmp_path: Path) -> dict[str, Any]:
    control = ServerControl.probe(url, None, None)
    assert control is not None, "the server has no /weight_info (VLLM_SERVER_DEV_MODE=1?)"
    control.set_weight_version("step-7")  # a trainer names its weights on the server
    write_experiment(tmp_path / "exps", "a", {"task": "task a"})
    logs = tmp_path / "logs"
    run = RunConfig(
        experiments_dir=tmp_path / "exps", log_dir=logs, upstream_url=url,
        llm=LlmOptions(SERVED_NAME, temperature=1.0), jobs=2, wait_for_llm_s=60,
        sampling=SamplingPolicy(override={"max_tokens": 4}),
    )  # fmt: skip
    config = EngineConfig(
        run=run, server_versions="on", export=ExportOptions(allow_raw_logprobs=True)
    )
    seen: dict[str, Any] = {}

    async def main() -> tuple[Group, Group]:
        async with Engine(config, executor=partial(InProcessExecutor, steps=2)) as engine:
            seen["start"] = engine.policy_version
            await engine.submit(["a"], group_size=2)
            first = await engine.next_group()
            assert await engine.pause(timeout=120)
            seen["paused"] = server_paused(url)
            control.set_weight_version("step-8")  # the swap, named by the trainer
            engine.resume()
            seen["resumed"] = (server_paused(url), engine.policy_version)
            engine.set_policy_version(5)  # the engine names it: the server is told
            seen["told"] = control.weight_version()
            await engine.submit(["a"], group_size=2)
            return first, await engine.next_group()

    first, second = asyncio.run(main())
    seen["first"], seen["second"] = versions_of(logs, first), versions_of(logs, second)
    events = read_policy_journal(logs)
    assert events is not None
    seen["journal"] = [(e.event, e.weight_version, e.version) for e in events]
    return seen


def test_the_engine_takes_the_server_s_weight_version_and_pause(
    vllm: VllmServer, tmp_path: Path
) -> None:
    seen = engine_on_server_versions(vllm.url, tmp_path)
    assert seen == {
        "start": 0,  # the first weight_version seen is the version the engine starts at
        "paused": True,
        "resumed": (False, 1),  # a new name: the next version
        "told": "5",
        "first": {(0, 0)},
        "second": {(5, 5)},
        "journal": [
            ("version", "step-7", 0),
            ("pause", None, None),
            ("idle", None, None),
            ("version", "step-8", 1),
            ("resume", None, None),
            ("version", "5", 5),
        ],
    }
