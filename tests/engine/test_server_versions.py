"""The server's weight_version strings as the engine's int versions, and an engine told to
take the server's versions from a server that has none (the real server's endpoints are
the vLLM tier's: tests/vllm/test_engine_versions.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from contagent.engine import Engine, EngineConfig
from contagent.engine.server_control import PolicyJournal, ServerControl
from contagent.errors import ContagentError
from contagent.proxy.policy_gate import PolicyGate
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


class _DevModeServer(ThreadingHTTPServer):
    """vLLM's dev-mode control endpoints as the engine calls them: each call is recorded
    with what the engine's proxies were doing when it arrived."""

    def __init__(self, gate: PolicyGate) -> None:
        super().__init__(("127.0.0.1", 0), _DevModeHandler)
        self.gate = gate
        self.weight_version = "default"
        self.calls: list[tuple[str, str, int, bool]] = []  # method, path, in flight, held

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _DevModeHandler(BaseHTTPRequestHandler):
    server: _DevModeServer

    def _answer(self) -> None:
        fake = self.server
        fake.calls.append((self.command, self.path, fake.gate.inflight, fake.gate.paused))
        body = json.dumps({"weight_version": fake.weight_version}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def test_a_pause_pauses_the_server_in_wait_mode_once_nothing_is_upstream(
    tasks: Path, stub: RunningStub, tmp_path: Path
) -> None:
    config = EngineConfig(run=run_config(tasks, tmp_path / "logs", stub), export=SAMPLING)
    engine = Engine(config, executor=partial(InProcessExecutor, steps=4, step_delay=0.02))
    fake = _DevModeServer(engine.gate)
    serving = threading.Thread(target=fake.serve_forever, daemon=True)
    serving.start()

    async def main() -> None:
        async with engine:
            engine.server = ServerControl(fake.url, None, None)
            assert engine.sync_policy_version() == 0  # "default": the version it is at
            await engine.submit(["a"], group_size=2)
            assert await engine.pause(timeout=30)  # its agents running
            fake.weight_version = "step-3"  # the trainer swapped and named its weights
            engine.resume()
            assert engine.policy_version == 1
            await engine.next_group()

    try:
        asyncio.run(main())
    finally:
        fake.shutdown()
        fake.server_close()
    assert fake.calls == [
        ("GET", "/weight_info", 0, False),
        ("POST", "/pause?mode=wait", 0, True),  # never aborting, after the proxies' wait
        ("GET", "/weight_info", 0, True),
        ("POST", "/resume", 0, True),  # the held requests go after the server resumed
    ]
