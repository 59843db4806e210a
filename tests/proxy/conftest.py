"""Fixtures: a scripted upstream and a recording proxy in front of it, both on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contagent._loopthread import InThread
from contagent.proxy import RunningProxy, start_proxy_in_thread
from contagent.testing.llm_stub import RunningStub, Script, start_stub_in_thread
from tests.proxy.helpers import UPSTREAM_KEY
from tests.proxy.upstreams import AiohttpUpstream


@pytest.fixture
def stub_factory() -> Iterator[Callable[[Script], RunningStub]]:
    started: list[RunningStub] = []

    def make(script: Script) -> RunningStub:
        stub = start_stub_in_thread(script)
        started.append(stub)
        return stub

    yield make
    for stub in started:
        stub.stop()


@pytest.fixture
def upstream() -> Iterator[Callable[[Any], Any]]:
    """Serves a test server of tests/proxy/upstreams.py on its own thread until the test ends;
    returns the started server (its ``url``, ``port``, what it saw)."""
    started: list[InThread[Any]] = []

    def start(service: Any) -> Any:
        served = InThread(service, "test-upstream")
        started.append(served)
        return served.service

    yield start
    for served in started:
        served.stop()


@pytest.fixture
def odd_upstream(upstream: Callable[[Any], Any]) -> Callable[..., Any]:
    """Serves an :class:`AiohttpUpstream` with the given handler: ``(handler,
    ssl_context=None, **server options)``."""
    return lambda handler, ssl_context=None, **kw: upstream(
        AiohttpUpstream(handler, ssl_context, **kw)
    )


@pytest.fixture
def proxy_factory(tmp_path: Path) -> Iterator[Callable[..., RunningProxy]]:
    started: list[RunningProxy] = []

    def make(upstream: str, **kw: Any) -> RunningProxy:
        kw.setdefault("upstream_api_key", UPSTREAM_KEY)
        proxy = start_proxy_in_thread(upstream, kw.pop("record_dir", tmp_path / "records"), **kw)
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()
