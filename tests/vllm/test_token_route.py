"""The token route against the real server: Claude Code's and Codex's conversations served
from chat completions give the prompt vLLM's own Messages and Responses routes render, and
the same greedy answer, body for body and event for event.

A second, module-scoped server runs with ``--enable-scale-out`` for vLLM's render routes
(``/v1/messages/render``, ``/v1/responses/render``, ``/v1/chat/completions/render``), with
a context long enough for the agents' real requests (:data:`REPLAY_FLAGS`). For every
request the real agents sent (:mod:`tests.vllm.agent_fixtures`), greedy (temperature 0, no
prefix cache):

- the prompt ids of the translated chat request equal vLLM's rendering of the original;
- the JSON answer and the stream's events equal vLLM's own, except what vLLM draws at
  random per answer (:data:`RANDOM`): ids, timestamps, thinking signatures; and where a
  text is cut into deltas, which follows the engine's pace on either route (:func:`coalesced`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contagent.wire.translate import template_probe
from contagent.wire.translate.anthropic_events import MessagesEvents
from contagent.wire.translate.anthropic_reply import to_messages_response
from contagent.wire.translate.anthropic_request import to_chat_request as messages_to_chat
from contagent.wire.translate.responses_events import ResponsesEvents
from contagent.wire.translate.responses_reply import ReplyContext, to_responses_response
from contagent.wire.translate.responses_request import to_chat_request as responses_to_chat
from tests.vllm import agent_fixtures
from tests.vllm import server as vllm_server
from tests.vllm.conversations import Meta

pytestmark = pytest.mark.vllm

#: Fields vLLM fills at random per answer, so the two routes cannot agree on them.
RANDOM = frozenset({"id", "signature", "created_at", "item_id", "call_id"})
#: What the proxy adds to a chat request to get token data.
TOKEN_FIELDS = {"return_token_ids": True, "logprobs": True, "top_logprobs": 0}


#: The replay server: render routes, and a context for Claude Code's ~22,000-token requests
#: (the tiny model's RoPE has no trained length to keep to).
REPLAY_FLAGS = (
    "--enable-scale-out", "--max-model-len", str(agent_fixtures.MAX_MODEL_LEN),
    "--hf-overrides", json.dumps({"max_position_embeddings": agent_fixtures.MAX_MODEL_LEN}),
)  # fmt: skip


@pytest.fixture(scope="module")
def scaled(meta: Meta, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    log = tmp_path_factory.mktemp("vllm-scaled") / "server.log"
    with (
        vllm_server.serving(meta.model_dir, log, *REPLAY_FLAGS) as srv,
        httpx.Client(base_url=srv.url, timeout=300) as client,
    ):
        yield client


def masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<random>" if k in RANDOM and v else masked(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def post(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    resp = client.post(path, json=body, headers=headers)
    assert resp.status_code == 200, f"{path}: {resp.status_code} {resp.text[:500]}"
    return dict(resp.json())


def sse(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[str]:
    """The data lines of a stream, in order (``[DONE]`` included where sent)."""
    with client.stream("POST", path, json=body, headers=headers) as resp:
        assert resp.status_code == 200, path
        return [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]


def events(raw: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for event in raw:
        head, data = event.decode().split("\n", 1)
        out.append(
            {"event": head.removeprefix("event: "), **json.loads(data.removeprefix("data: "))}
        )
    return out


#: the text field of each Messages delta type
_DELTA_TEXT = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}


def _join(prev: dict[str, Any], event: dict[str, Any]) -> dict[str, Any] | None:
    """The two delta events as one, or None when they are not two pieces of one part."""
    kind = event.get("type")
    if kind != prev.get("type"):
        return None
    if kind == "content_block_delta":  # Messages
        a, b = prev["delta"], event["delta"]
        field = _DELTA_TEXT.get(a.get("type"))
        if event["index"] != prev["index"] or b.get("type") != a.get("type") or field is None:
            return None
        return {**prev, "delta": {**a, field: a[field] + b[field]}}
    if isinstance(kind, str) and kind.endswith(".delta") and isinstance(event.get("delta"), str):
        same = ("item_id", "output_index", "content_index")
        if any(prev.get(k) != event.get(k) for k in same):
            return None
        joined = {**prev, "delta": prev["delta"] + event["delta"]}
        if isinstance(prev.get("logprobs"), list) and isinstance(event.get("logprobs"), list):
            joined["logprobs"] = prev["logprobs"] + event["logprobs"]
        return joined
    return None


def coalesced(stream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with each run of deltas to one content part joined into one delta.

    vLLM sends as many tokens in a chunk as its engine made since the last one, on its own
    routes as on the chat route, so where a text is cut into deltas depends on the load,
    not on the translation; the text, the order and every other event must still agree.
    Responses' sequence numbers are checked consecutive, then counted again."""
    numbers = [e["sequence_number"] for e in stream if "sequence_number" in e]
    if numbers:
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    out: list[dict[str, Any]] = []
    for event in stream:
        joined = _join(out[-1], event) if out else None
        if joined is None:
            out.append(event)
        else:
            out[-1] = joined
    if numbers:
        out = [{**e, "sequence_number": numbers[0] + i} for i, e in enumerate(out)]
    return out


def native_events(lines: list[str], head: str) -> list[dict[str, Any]]:
    return [
        {"event": json.loads(line)["type"], **json.loads(line)}
        for line in lines
        if line != "[DONE]"
    ]


@pytest.fixture(scope="module")
def merge(scaled: httpx.Client) -> bool:
    """The template decision vLLM's Messages server makes, made through the chat route."""
    resp = scaled.post("/v1/chat/completions", json=template_probe.merge_probe("tiny"))
    decision = template_probe.merge_decision(resp.status_code)
    # Qwen3's template renders a later system message where it stands; the render check
    # below holds the decision to vLLM's own on the fixtures' inline system message
    assert decision is not None
    return decision


@pytest.mark.parametrize("req", agent_fixtures.CLAUDE_CODE, ids=lambda r: r.id)
def test_claude_code_requests_render_and_answer_as_vllms_messages_route(
    scaled: httpx.Client, merge: bool, req: agent_fixtures.Recorded
) -> None:
    body = {**req.body, "temperature": 0}
    chat = messages_to_chat(body, merge_inline_system=merge)
    theirs = post(scaled, "/v1/messages/render", body, req.headers)["token_ids"]
    ours = post(scaled, "/v1/chat/completions/render", chat)["token_ids"]
    assert ours == theirs

    native = post(scaled, "/v1/messages", {**body, "stream": False}, req.headers)
    answer = post(
        scaled,
        "/v1/chat/completions",
        {**messages_to_chat({**body, "stream": False}, merge_inline_system=merge), **TOKEN_FIELDS},
    )
    assert answer["prompt_token_ids"] == theirs
    assert masked(to_messages_response(answer)) == masked(native)

    native_stream = native_events(sse(scaled, "/v1/messages", body, req.headers), "event")
    writer = MessagesEvents()
    ours_stream = [
        e
        for line in sse(scaled, "/v1/chat/completions", {**chat, **TOKEN_FIELDS})
        for e in writer.feed(line if line == "[DONE]" else json.loads(line))
    ]
    assert masked(coalesced(events(ours_stream))) == masked(coalesced(native_stream))


@pytest.mark.parametrize("req", agent_fixtures.CODEX, ids=lambda r: r.id)
def test_codex_requests_render_and_answer_as_vllms_responses_route(
    scaled: httpx.Client, req: agent_fixtures.Recorded
) -> None:
    body = {**req.body, "temperature": 0}
    chat = responses_to_chat(body)
    theirs = post(scaled, "/v1/responses/render", body, req.headers)["token_ids"]
    ours = post(scaled, "/v1/chat/completions/render", chat)["token_ids"]
    assert ours == theirs

    native = post(scaled, "/v1/responses", {**body, "stream": False}, req.headers)
    answer = post(
        scaled,
        "/v1/chat/completions",
        {**responses_to_chat({**body, "stream": False}), **TOKEN_FIELDS},
    )
    ctx = ReplyContext(request=body, max_model_len=agent_fixtures.MAX_MODEL_LEN)
    assert masked(to_responses_response(answer, ctx)) == masked(native)

    native_stream = native_events(sse(scaled, "/v1/responses", body, req.headers), "type")
    writer = ResponsesEvents(ReplyContext(request=body, max_model_len=agent_fixtures.MAX_MODEL_LEN))
    ours_stream = [
        e
        for line in sse(scaled, "/v1/chat/completions", {**chat, **TOKEN_FIELDS})
        for e in writer.feed(line if line == "[DONE]" else json.loads(line))
    ]
    assert masked(coalesced(events(ours_stream))) == masked(coalesced(native_stream))


@pytest.fixture(scope="module")
def effort(scaled: httpx.Client) -> str:
    """How vLLM's Messages server renders ``thinking: disabled``, probed through the chat route."""
    prompts = {
        name: template_probe.prompt_ids(resp.status_code, resp.json())
        for name, body in template_probe.effort_probes("tiny").items()
        for resp in [scaled.post("/v1/chat/completions", json=body)]
    }
    return template_probe.disabled_thinking_effort(prompts)


def test_disabled_thinking_answers_as_vllms_messages_route(
    scaled: httpx.Client, merge: bool, effort: str
) -> None:
    assert effort == "none"  # Qwen3's template turns thinking off for it
    body = {
        **agent_fixtures.CLAUDE_CODE[1].body,
        "temperature": 0,
        "thinking": {"type": "disabled"},
        "stream": False,
    }
    native = post(scaled, "/v1/messages", body)
    chat = messages_to_chat(body, merge_inline_system=merge, disabled_thinking_effort=effort)
    answer = post(scaled, "/v1/chat/completions", {**chat, **TOKEN_FIELDS})
    assert masked(to_messages_response(answer)) == masked(native)
