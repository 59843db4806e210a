"""The LLM server check before a run: real HTTP(S) servers on loopback, no Docker engine."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from contagent._loopthread import InThread
from contagent.errors import ContagentError
from contagent.runner.config import LlmOptions, RunConfig
from contagent.runner.preflight import (
    EXIT_NOT_ANSWERING,
    EXIT_UNUSABLE,
    MAX_LISTING_BYTES,
    LlmServer,
    PreflightError,
    wait_until_ready,
)
from contagent.testing.llm_stub import start_stub_in_thread
from tests.helpers import cli, free_port
from tests.proxy.upstreams import AiohttpUpstream

Handler = Callable[[web.BaseRequest], Any]


class _Server(AiohttpUpstream):
    """An OpenAI-style model list served by ``handler``; every request is kept."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.seen: list[web.BaseRequest] = []

        async def serve(request: web.BaseRequest) -> web.StreamResponse:
            self.seen.append(request)
            result: web.StreamResponse = await handler(request)
            return result

        super().__init__(serve, ssl_context)


@pytest.fixture
def serve() -> Iterator[Callable[..., _Server]]:
    started: list[InThread[_Server]] = []

    def make(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> _Server:
        served = InThread(_Server(handler, ssl_context), "preflight-test-server")
        started.append(served)
        return served.service

    yield make
    for served in started:
        served.stop()


def listing(*names: str) -> Handler:
    async def handler(request: web.BaseRequest) -> web.Response:
        data = {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
        return web.json_response(data)

    return handler


def answer(status: int, body: bytes = b"{}") -> Handler:
    async def handler(request: web.BaseRequest) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json")

    return handler


def no_wait(seconds: float) -> None:
    raise AssertionError("waited on an answer that waiting will not change")


def test_ready_when_the_model_is_listed_and_the_check_is_what_the_proxy_sends(
    serve: Callable[..., _Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(listing("other", "qwen3-8b"))
    # an environment proxy would be another route than the recording proxy's: not used
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{free_port()}")
    probe = LlmServer(server.url, "qwen3-8b", "sk-key", None).probe()
    assert probe.ready and probe.served == ("other", "qwen3-8b")
    [req] = server.seen
    assert (req.method, req.path) == ("GET", "/v1/models")
    assert req.headers["Authorization"] == "Bearer sk-key"


def test_an_upstream_with_a_path_prefix_is_checked_under_it(serve: Callable[..., _Server]) -> None:
    server = serve(listing("m"))
    assert LlmServer(server.url + "/api", "m", None, None).probe().ready
    assert server.seen[0].path == "/api/v1/models"
    assert "Authorization" not in server.seen[0].headers  # no key: none sent


def test_model_not_listed_names_what_is_served(serve: Callable[..., _Server]) -> None:
    server = serve(listing("qwen3-8b", "qwen3-8b-lora"))
    with pytest.raises(PreflightError) as err:
        wait_until_ready(
            LlmServer(server.url, "qwen3", None, None), 600, lambda m: None, sleep=no_wait
        )
    assert err.value.exit_code == EXIT_UNUSABLE
    assert str(err.value) == (
        f"LLM server: GET {server.url}/v1/models: model 'qwen3' (--served-model-name) is not "
        "served; it serves 'qwen3-8b', 'qwen3-8b-lora'"
    )
    assert len(server.seen) == 1  # a definite answer is not waited on


@pytest.mark.parametrize(
    ("handler", "key", "expected"),
    [
        (answer(401), "sk-wrong", "401 Unauthorized: the server refused the key given"),
        (answer(401), None, "401 Unauthorized: the server refused no key (--api-key"),
        (answer(403), "k", "403 Forbidden: the server refused the key given"),
        (answer(404), None, "404 Not Found (is --vllm-url the server's address?)"),
        (answer(200, b"<html>hello</html>"), None, "200 OK, but not an OpenAI model list"),
        (answer(200, b'{"data": {"id": "m"}}'), None, "200 OK, but not an OpenAI model list"),
        (
            answer(200, b'{"data": []}'),
            None,
            "'m' (--served-model-name) is not served; it serves nothing",
        ),
    ],
)
def test_answers_that_waiting_will_not_change_stop_at_once(
    serve: Callable[..., _Server], handler: Handler, key: str | None, expected: str
) -> None:
    server = serve(handler)
    with pytest.raises(PreflightError) as err:
        wait_until_ready(LlmServer(server.url, "m", key, None), 600, lambda m: None, sleep=no_wait)
    assert expected in str(err.value)
    assert err.value.exit_code == EXIT_UNUSABLE and len(server.seen) == 1


def test_a_huge_listing_is_not_read(serve: Callable[..., _Server]) -> None:
    names = [f"model-{i:08d}" for i in range(MAX_LISTING_BYTES // 40 + 1)] + ["m"]
    server = serve(listing(*names))
    probe = LlmServer(server.url, "m", None, None).probe()
    assert not probe.ready and "not an OpenAI model list" in probe.detail


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_server_side_statuses_are_waited_on(serve: Callable[..., _Server], status: int) -> None:
    server = serve(answer(status))
    probe = LlmServer(server.url, "m", None, None).probe()
    assert not probe.ready and probe.waitable and probe.detail.startswith(str(status))


def test_tls_is_verified_with_the_given_ca(serve: Callable[..., _Server], tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(ctx)
    server = serve(listing("m"), ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    assert LlmServer(server.url, "m", "k", ca_file).probe().ready

    with pytest.raises(PreflightError) as err:  # the system store does not know that CA
        wait_until_ready(LlmServer(server.url, "m", "k", None), 600, lambda m: None, sleep=no_wait)
    assert err.value.exit_code == EXIT_UNUSABLE
    assert f"LLM server: GET {server.url}/v1/models: TLS error: certificate verify failed" in str(
        err.value
    )


def test_no_server_waits_with_a_status_line_then_fails_in_one_line() -> None:
    port = free_port()
    clock = [0.0]
    statuses: list[str] = []

    def sleep(s: float) -> None:
        clock[0] += s

    with pytest.raises(PreflightError) as err:
        wait_until_ready(
            LlmServer(f"http://127.0.0.1:{port}", "m", None, None),
            5,
            statuses.append,
            clock=lambda: clock[0],
            sleep=sleep,
        )
    assert err.value.exit_code == EXIT_NOT_ANSWERING
    assert str(err.value) == (
        f"LLM server not ready within --wait-for-llm 5 s: GET http://127.0.0.1:{port}/v1/models: "
        "connection refused"
    )
    assert statuses == [
        f"waiting for the LLM server: GET http://127.0.0.1:{port}/v1/models: connection refused "
        f"({t} s of --wait-for-llm 5 s)"
        for t in (0, 2, 4)
    ]


def test_wait_zero_checks_once() -> None:
    port = free_port()
    statuses: list[str] = []
    with pytest.raises(PreflightError) as err:
        wait_until_ready(LlmServer(f"http://127.0.0.1:{port}", "m", None, None), 0, statuses.append)
    assert str(err.value) == (
        f"LLM server not ready: GET http://127.0.0.1:{port}/v1/models: connection refused"
    )
    assert statuses == []


def test_a_server_that_starts_while_waiting_is_used() -> None:
    port = free_port()
    started: list[Any] = []

    def sleep(s: float) -> None:  # the server comes up during the first pause
        if not started:
            started.append(start_stub_in_thread([], port=port, models=["m"]))

    try:
        statuses: list[str] = []
        wait_until_ready(
            LlmServer(f"http://127.0.0.1:{port}/", "m", None, None),
            600,
            statuses.append,
            sleep=sleep,
        )
        assert len(statuses) == 1 and "connection refused" in statuses[0]
        assert [r.path for r in started[0].requests] == ["/v1/models"]
    finally:
        for stub in started:
            stub.stop()


def test_user_info_is_not_shown() -> None:
    server = LlmServer(f"http://user:pw@127.0.0.1:{free_port()}", "m", None, None)
    assert "pw" not in server.tried and server.tried.startswith("GET http://127.0.0.1:")


def test_wait_for_llm_option(tmp_path: Path) -> None:
    with pytest.raises(ContagentError, match="--wait-for-llm must be 0 or more"):
        RunConfig(tmp_path, tmp_path, "http://h", LlmOptions("m"), wait_for_llm_s=-1)
    proc = cli("run", "--served-model-name", "m", "--experiments-dir", str(tmp_path),
               "--wait-for-llm", "-1")  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "contagent: error: --wait-for-llm must be 0 or more seconds"
    )
    assert "Traceback" not in proc.stderr


def test_tokens_follow_the_servers_kind_from_the_check_it_just_made() -> None:
    vllm = start_stub_in_thread([], models=("m",))
    other = start_stub_in_thread([], models=("m",), owned_by="openai")
    try:
        server = LlmServer(vllm.url, "m", None, None)
        wait_until_ready(server, 0, lambda _: None)
        assert server.owners == {"vllm"}
        plan = server.token_plan("auto")
        assert plan.record and plan.server is not None
        assert (plan.server["name"], plan.server["version"]) == ("vllm", "0.32.0")
        # the model list is the check's: the plan asked only for /version, then probed the
        # logprobs mode, the render route, the template's take on a later system message and
        # its rendering of each reasoning effort (six), each with the served model
        assert [r.path for r in vllm.requests] == ["/v1/models"]
        assert [r.json["model"] for r in vllm.stub.server_questions] == ["m"] * 10
        assert plan.server["thinking_off_effort"] == "none"
        assert plan.server["max_model_len"] == 32768  # from the check's model list
        server = LlmServer(other.url, "m", None, None)
        wait_until_ready(server, 0, lambda _: None)
        assert not server.token_plan("auto").record
        with pytest.raises(ContagentError, match="--tokens on: the upstream is not vLLM"):
            server.token_plan("on")
    finally:
        vllm.stop()
        other.stop()


def test_an_unknown_tokens_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ContagentError, match="--tokens 'maybe': use one of auto, on, off"):
        RunConfig(tmp_path, tmp_path, "http://127.0.0.1:9", LlmOptions("m"), tokens="maybe")
