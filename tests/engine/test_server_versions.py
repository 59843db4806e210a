"""The server's weight_version strings as the engine's int versions, and an engine told to
take the server's versions from a server that has none (the real server's endpoints are
the vLLM tier's: tests/vllm/test_engine_versions.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from contagent.engine import Engine, EngineConfig
from contagent.engine.server_control import PolicyJournal, ServerControl
from contagent.errors import ContagentError
from contagent.rawlog.policy_journal import read_policy_journal
from contagent.testing.inprocess import InProcessExecutor
from contagent.testing.llm_stub import RunningStub
from tests.engine.test_engine import SAMPLING, run_config


def test_weight_versions_map_to_ints_in_the_order_seen(tmp_path: Path) -> None:
    names = PolicyJournal(tmp_path)
    assert names.number("default", 0) == 0  # the first is where the engine starts
    assert names.number("step-a", 0) == 1
    assert names.number("7", 1) == 7  # digits at or past the current int keep their number
    assert names.number("3", 7) == 8  # digits behind it are a new name like any other
    assert names.number("step-a", 8) == 1  # a name seen before keeps its number


def test_a_server_without_the_endpoints(tasks: Path, stub: RunningStub, tmp_path: Path) -> None:
    assert ServerControl.probe(stub.url, None, None) is None
    run = run_config(tasks, tmp_path / "logs", stub)

    async def start(mode: str) -> int:
        config = EngineConfig(run=run, export=SAMPLING, server_versions=mode)
        async with Engine(config, executor=InProcessExecutor) as engine:
            assert engine.server is None
            engine.set_policy_version(2)  # the trainer's own versions
            engine.resume()
            return engine.sync_policy_version()

    assert asyncio.run(start("auto")) == asyncio.run(start("off")) == 2
    events = read_policy_journal(tmp_path / "logs")
    assert events is not None
    assert [(e.event, e.version, e.held) for e in events] == [
        ("version", 0, None), ("version", 2, None), ("resume", None, 0)
    ] * 2  # fmt: skip
    with pytest.raises(ContagentError, match="VLLM_SERVER_DEV_MODE=1"):
        asyncio.run(start("on"))
    with pytest.raises(ContagentError, match="auto, on or off"):
        EngineConfig(run=replace(run), server_versions="yes")


class _Told:
    """A server with its own versions, as far as set_policy_version speaks to it."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def set_weight_version(self, name: str) -> None:
        self.told.append(name)


def test_an_older_version_is_refused_before_the_server_is_told(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    config = EngineConfig(run=run_config(tasks, tmp_path / "logs", stub), export=SAMPLING)

    async def main() -> list[str]:
        async with Engine(config, executor=InProcessExecutor) as engine:
            server = engine.server = _Told()  # type: ignore[assignment]
            engine.set_policy_version(2)
            with pytest.raises(ValueError, match="1 is older than 2"):
                engine.set_policy_version(1)
            engine.server = None
            return server.told

    assert asyncio.run(main()) == ["2"]
    events = read_policy_journal(tmp_path / "logs")
    assert events is not None
    assert [(e.event, e.version) for e in events] == [("version", 0), ("version", 2)]
