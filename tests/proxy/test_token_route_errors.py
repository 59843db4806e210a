"""The token route's error answers: the chat route's error (status not 200) reaches a Messages
client in Anthropic's shape and a Responses client in the OpenAI shape, under the upstream's
status, as vLLM's own Messages and Responses routes answer, JSON and streamed alike; both
sides are recorded, and the log is read back only when the client's error is the
translation of the upstream's."""

from __future__ import annotations

import anthropic
import openai
import orjson
import pytest

from contagent.testing.llm_stub import Error, Raw, Reply
from contagent.wire.translate.rebuild import translation_problems
from tests.proxy.helpers import (
    CLIENT_KEY,
    content_type,
    exchanges,
    export_one_and_validate,
    post_answer,
    rewrite_record,
    write_result,
)
from tests.proxy.test_token_route import DEFAULTS, VLLM

#: vLLM's chat route's answer to a prompt past the model's length (its ErrorResponse)
TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 32768 tokens. However, you "
        "requested 40000 output tokens and your prompt contains at least 9 input tokens.",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }
}
UNKNOWN_MODEL = {"error": {"message": "The model `x` does not exist.", "type": "NotFoundError",
                           "param": None, "code": 404}}  # fmt: skip
MESSAGES = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("status", "upstream_body"), [(400, TOO_LONG), (404, UNKNOWN_MODEL)])
def test_a_messages_client_gets_the_upstream_error_in_anthropics_shape(
    stub_factory, proxy_factory, tmp_path, stream, status, upstream_body
):
    """As vLLM's Messages route translates its errors: the type and message kept, in
    Anthropic's shape, under the same status; a streamed request gets the same plain error,
    no event stream."""
    stub = stub_factory([Error(status, upstream_body)])
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM))
    head, payload = post_answer(proxy, "/messages", {**MESSAGES, "stream": stream})
    error = upstream_body["error"]
    want = {"type": "error", "error": {"type": error["type"], "message": error["message"]}}
    assert head.startswith(b"HTTP/1.1 %d " % status)
    assert content_type(head) == b"application/json"
    assert payload == orjson.dumps(want)
    assert [r.path for r in stub.requests] == ["/v1/chat/completions"]
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["upstream"]["path"] == "/v1/chat/completions" and req["stream"] is stream
    assert out["outcome"] == "http_error" and out["error"] == f"http status {status}"
    assert (out["status"], out["client_status"]) == (status, status)
    assert out["response"] == want and out["stream_events"] is None
    assert out["upstream"] == {"response": upstream_body, "response_text": None,
                               "stream_events": None, "usage": None, "finish_reasons": []}  # fmt: skip
    assert out["schema_version"] == 7 and "drawn" not in out
    # the log reads back as sound: the client's error is the translation of the upstream's
    assert translation_problems({0: req}, {0: out}) == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_client_gets_the_upstream_error_as_vllm_s_responses_route_sends_it(
    stub_factory, proxy_factory, tmp_path, stream
):
    """vLLM's Responses route answers its errors in the same OpenAI shape as its chat route:
    the client gets the upstream's error body, byte for byte, under the same status."""
    sent = orjson.dumps(TOO_LONG)
    stub = stub_factory([Error(400, sent)])
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM))
    head, payload = post_answer(proxy, "/responses", {**RESPONSES, "stream": stream})
    assert head.startswith(b"HTTP/1.1 400 ") and content_type(head) == b"application/json"
    assert payload == sent
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "http_error" and (out["status"], out["client_status"]) == (400, 400)
    assert out["response"] == TOO_LONG and out["upstream"]["response"] == TOO_LONG
    assert translation_problems({0: req}, {0: out}) == []


UNREADABLE = [
    (502, b"<html><body>Bad gateway</body></html>", "text/html"),
    (500, b'{"detail": "Internal Server Error"}', "application/json"),
    (503, b"", "application/json"),
    (504, b"upstream request timeout", "text/plain"),
    (400, b'data: {"error": "not an event stream answer"}\n\n', "text/event-stream"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("status", "body", "sent_type"), UNREADABLE)
@pytest.mark.parametrize("route", ["/messages", "/responses"])
def test_an_error_body_the_translation_cannot_read_is_one_line_naming_the_status(
    stub_factory, proxy_factory, tmp_path, stream, status, body, sent_type, route
):
    """Not JSON, no error message, empty, even an event stream: the client gets a plain error
    of its API's shape with one line naming the status, and the log keeps the body as it came."""
    stub = stub_factory([Raw(body, status=status, content_type=sent_type)])
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM))
    request = MESSAGES if route == "/messages" else RESPONSES
    head, payload = post_answer(proxy, route, {**request, "stream": stream})
    assert head.startswith(b"HTTP/1.1 %d " % status)
    assert content_type(head) == b"application/json" and b"\n" not in payload
    line = f"the upstream answered HTTP {status} with no error message the proxy can read"
    if route == "/messages":
        # Anthropic's documented type for the status, else its generic one for the class
        kind = (
            "timeout_error"
            if status == 504
            else "api_error"
            if status >= 500
            else "invalid_request_error"
        )
        want: dict = {"type": "error", "error": {"type": kind, "message": line}}
    else:
        phrase = {502: "Bad Gateway", 500: "Internal Server Error", 503: "Service Unavailable",
                  400: "Bad Request", 504: "Gateway Timeout"}[status]  # fmt: skip
        want = {"error": {"message": line, "type": phrase, "param": None, "code": status}}
    assert payload == orjson.dumps(want)
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "http_error" and out["response"] == want
    assert (out["status"], out["client_status"]) == (status, status)
    up = out["upstream"]
    if body.startswith(b"{"):
        assert up["response"] == orjson.loads(body) and up["response_text"] is None
    else:
        assert up["response"] is None and up["response_text"] == (body.decode() or None)
    assert translation_problems({0: req}, {0: out}) == []


def test_the_real_clients_read_the_translated_errors(stub_factory, proxy_factory):
    """Claude Code's and Codex's own SDKs raise their API's error for the status, with the
    upstream's message and type."""
    stub = stub_factory([Error(400, TOO_LONG), Error(404, UNKNOWN_MODEL)])
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM))
    base = proxy.rollout_base_url("r1")
    claude = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key=CLIENT_KEY,
                                 max_retries=0, timeout=20)  # fmt: skip
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(**MESSAGES)
    assert bad.value.status_code == 400 and "maximum context length" in bad.value.message
    assert bad.value.body == {"type": "error", "error": {"type": "BadRequestError",
                                                         "message": TOO_LONG["error"]["message"]}}  # fmt: skip
    codex = openai.OpenAI(base_url=base, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    with pytest.raises(openai.NotFoundError) as missing:
        codex.responses.create(**RESPONSES)
    assert missing.value.status_code == 404 and "does not exist" in missing.value.message


def _rollout_with_an_error(stub_factory, proxy_factory, tmp_path, stream: bool):
    """A Messages rollout whose first exchange the upstream refused (the agent tried again)."""
    stub = stub_factory([Error(400, TOO_LONG), Reply(content="the answer is 42", chunks=3)])
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM), sampling=DEFAULTS)
    for _ in range(2):
        post_answer(proxy, "/messages", {**MESSAGES, "stream": stream})
    proxy.stop()
    records = tmp_path / "records"
    write_result(records, "r1")
    return records


def _client_error(out: dict) -> None:
    out["response"]["error"]["message"] = "something else"


def _client_status(out: dict) -> None:
    out["client_status"] = 500


def _upstream_error(out: dict) -> None:
    out["upstream"]["response"]["error"]["type"] = "InternalServerError"


def _status(out: dict) -> None:
    out["status"] = 500


def _no_upstream(out: dict) -> None:
    del out["upstream"]


ERROR_MUTATIONS = {
    "client error": (_client_error, "exchange 0: the client's error is not the translation"),
    "client status": (_client_status, "exchange 0: the client got status 500, the upstream"),
    "upstream error": (_upstream_error, "exchange 0: the client's error is not the translation"),
    "upstream status": (
        _status,
        "exchange 0: the client got status 400, the upstream answered 500",
    ),
    "no upstream": (_no_upstream, "exchange 0: no upstream error answer is recorded"),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("mutation", sorted(ERROR_MUTATIONS))
def test_a_changed_side_of_a_translated_error_is_caught(
    stub_factory, proxy_factory, tmp_path, stream, mutation
):
    """The error exchange of a training-ready rollout changed in the raw log: the read
    rebuilds the client's error from the upstream's and finds them apart."""
    records = _rollout_with_an_error(stub_factory, proxy_factory, tmp_path, stream)
    good = export_one_and_validate(records, tmp_path / "good")
    assert good["training_ready"] is True, good["training_ready_reason"]
    change, said = ERROR_MUTATIONS[mutation]
    rewrite_record(records / "r1" / "exchanges.jsonl", 0, "outcome", change)
    row = export_one_and_validate(records, tmp_path / "bad")
    assert row["not_ready_kinds"] == ["translation_mismatch"]
    assert row["training_ready_reason"].startswith(said), row["training_ready_reason"]


def test_an_error_recorded_before_error_answers_were_translated_reads_as_it_did(
    stub_factory, proxy_factory, tmp_path
):
    """A version 6 log holds no upstream side for an error: the client got the upstream's
    error as it was, which is no translation to check."""
    stub = stub_factory([Error(400, TOO_LONG)])
    proxy = proxy_factory(stub.url, tokens=True, server=dict(VLLM))
    post_answer(proxy, "/messages", MESSAGES)
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    old = {**out, "schema_version": 6, "response": TOO_LONG}
    del old["upstream"]
    assert translation_problems({0: req}, {0: old}) == []
    assert translation_problems({0: req}, {0: {**old, "schema_version": 7}}) == [
        ("translation_mismatch", "exchange 0: no upstream error answer is recorded")
    ]
