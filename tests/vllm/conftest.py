"""The vLLM tier's fixtures: one real server per logprobs mode for the session (vLLM's
default ``raw_logprobs``, and ``processed_logprobs`` started only when a test asks for it),
and a recording proxy in front of each.

Needs ``CONTAGENT_VLLM_PYTHON`` (the tier's venv) and ``CONTAGENT_VLLM_MODEL`` (the
built tiny model); scripts/ci-vllm.sh sets both and ``CONTAGENT_VLLM_TESTS=1``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from contagent.proxy import RunningProxy, start_proxy_in_thread
from contagent.proxy.identify import plan_tokens
from tests.vllm import server as vllm_server
from tests.vllm.conversations import Meta


@pytest.fixture(scope="session")
def meta() -> Meta:
    model = os.environ.get("CONTAGENT_VLLM_MODEL")
    if not model:
        pytest.fail("CONTAGENT_VLLM_MODEL is not set: run scripts/ci-vllm.sh")
    return Meta.load(Path(model))


@pytest.fixture(scope="session")
def vllm(meta: Meta, tmp_path_factory: pytest.TempPathFactory) -> Iterator[vllm_server.VllmServer]:
    with vllm_server.serving(meta.model_dir, tmp_path_factory.mktemp("vllm") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="session")
def record_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("records")


@pytest.fixture(scope="session")
def proxy(vllm: vllm_server.VllmServer, record_dir: Path) -> Iterator[RunningProxy]:
    plan = plan_tokens("on", vllm.url)
    with start_proxy_in_thread(vllm.url, record_dir, tokens=True, server=plan.server) as running:
        yield running


@pytest.fixture(scope="session")
def vllm_processed(
    meta: Meta, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[vllm_server.VllmServer]:
    """A second server, in ``processed_logprobs`` mode, answering the render route."""
    log = tmp_path_factory.mktemp("vllm-processed") / "server.log"
    with vllm_server.serving(meta.model_dir, log, *vllm_server.PROCESSED) as srv:
        yield srv


@pytest.fixture(scope="session")
def processed_proxy(
    vllm_processed: vllm_server.VllmServer, record_dir: Path
) -> Iterator[RunningProxy]:
    plan = plan_tokens("on", vllm_processed.url)
    with start_proxy_in_thread(
        vllm_processed.url, record_dir, tokens=True, server=plan.server
    ) as running:
        yield running
