"""The token route's error answers against the real server: a bad Messages or Responses
request answered through the proxy (from vLLM's chat route) with the status and error type
vLLM's own Messages or Responses route answers it with (the same error body, here), JSON and
streamed, and recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from contagent.proxy import RunningProxy
from tests.vllm.conversations import MODEL
from tests.vllm.server import VllmServer

pytestmark = pytest.mark.vllm

TURN = [{"role": "user", "content": "hi"}]
#: (route, body) of each bad request vLLM's own route refuses
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "messages past the model's length": (
        "/messages", {"model": MODEL, "max_tokens": 10**7, "messages": TURN}),
    "messages of an unknown model": (
        "/messages", {"model": "no-such-model", "max_tokens": 9, "messages": TURN}),
    "responses of an unknown model": ("/responses", {"model": "no-such-model", "input": "hi"}),
}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_error_through_the_token_route_is_the_one_vllms_own_route_answers(
    vllm: VllmServer, proxy: RunningProxy, record_dir: Path, case: str, stream: bool
) -> None:
    route, body = CASES[case]
    body = {**body, "stream": stream}
    rollout = f"error-{'-'.join(case.split()[:2])}-{'stream' if stream else 'json'}"
    native = httpx.post(vllm.url + "/v1" + route, json=body, timeout=600)
    ours = httpx.post(proxy.rollout_base_url(rollout) + route, json=body, timeout=600)
    assert native.status_code >= 400, native.text
    assert ours.status_code == native.status_code, (ours.text, native.text)
    assert ours.headers["content-type"] == "application/json", ours.headers
    mine, theirs = ours.json(), native.json()
    # the whole error, its shape ("type": "error" for Messages only), type and message: the
    # Messages route makes the same chat request, which fails the same way
    assert mine == theirs
    log = record_dir / rollout / "exchanges.jsonl"
    req, out = (orjson.loads(line) for line in log.read_bytes().splitlines())
    assert req["upstream"]["path"] == "/v1/chat/completions"
    assert out["outcome"] == "http_error" and out["response"] == mine
    assert out["status"] == out["client_status"] == native.status_code
    assert out["upstream"]["response"]["error"]["code"] == native.status_code
