"""The moves of the scripted LLM stub, and how each becomes response bytes.

A move is what :mod:`contagent.testing.llm_stub` does with one request; the
functions here render a :class:`Reply` as a chat completion or as the chunk
events of a vLLM-style stream, and :class:`Fast` as its canned bodies. They are
pure, so tests can feed the same rendering to the proxy's parsers directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from contagent.testing import stub_tokens


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str | dict[str, Any] = "{}"
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return orjson.dumps(self.arguments).decode()


@dataclass(frozen=True)
class Reply:
    """A completion. ``chunks``: pieces content/reasoning/arguments are split into when streamed.

    ``delay`` waits before the response starts, ``chunk_delay`` between stream
    events; ``cut_after`` closes the connection after that many events, with
    no ``[DONE]`` (a stream broken mid-way).
    """

    content: str | None = "ok"
    tool_calls: Sequence[ToolCall] = ()
    reasoning_content: str | None = None
    finish_reason: str | None = None  # default: tool_calls when there are any, else stop
    usage: dict[str, int] | None = None  # default: derived from the sizes
    model: str | None = None  # default: the request's model
    delay: float = 0.0
    chunks: int = 3
    chunk_delay: float = 0.0
    cut_after: int | None = None


@dataclass(frozen=True)
class Error:
    """An HTTP error status with a body (a dict is sent as JSON)."""

    status: int
    body: bytes | str | dict[str, Any] = (
        b'{"error": {"message": "stub error", "type": "server_error"}}'
    )
    delay: float = 0.0


@dataclass(frozen=True)
class Raw:
    """Any body as is, e.g. malformed JSON with status 200."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    delay: float = 0.0


@dataclass(frozen=True)
class Events:
    """A raw SSE stream: each payload sent as ``data: <payload>\\n\\n`` (e.g. Responses-API events)."""

    payloads: Sequence[str]
    chunk_delay: float = 0.0
    cut_after: int | None = None


@dataclass(frozen=True)
class Reset:
    """Close the connection without any response (after ``delay``)."""

    delay: float = 0.0


@dataclass(frozen=True)
class Fast:
    """Benchmark mode: the same canned JSON for every request, or a ``stream_chunks``-event stream."""

    content: str = "ok"
    stream_chunks: int = 500
    chunk_text: str = "tok "
    #: prompt ids in the answers to requests that ask for token data (return_token_ids)
    prompt_tokens: int = 2000


Move = Reply | Error | Raw | Events | Reset


@dataclass
class StubRequest:
    index: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    time: float = field(default_factory=time.time)

    @property
    def stream(self) -> bool:
        return isinstance(self.json, dict) and self.json.get("stream") is True


Script = Sequence[Move] | Callable[[StubRequest], Move] | Fast


def _usage(
    req: StubRequest,
    reply: Reply,
    prompt: list[int] | None = None,
    sampled: list[int] | None = None,
) -> dict[str, int]:
    if reply.usage is not None:
        return dict(reply.usage)
    if prompt and sampled is not None:  # token ids asked for: the counts are theirs, as vLLM's
        return {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(sampled),
            "total_tokens": len(prompt) + len(sampled),
        }
    out_chars = len(reply.content or "") + len(reply.reasoning_content or "")
    out_chars += sum(len(t.name) + len(t.arguments_json) for t in reply.tool_calls)
    n_prompt, n_completion = max(1, len(req.body) // 4), max(1, out_chars // 4)
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_completion,
        "total_tokens": n_prompt + n_completion,
    }


def split_text(text: str, n: int) -> list[str]:
    """``text`` in at most ``n`` pieces of one length (the last shorter), as a stream sends it."""
    if n <= 1 or len(text) <= 1:
        return [text]
    step = -(-len(text) // n)
    return [text[i : i + step] for i in range(0, len(text), step)]


def _pieces(reply: Reply) -> list[tuple[str, str]]:
    calls = [(t.name, t.arguments_json) for t in reply.tool_calls]
    return stub_tokens.assistant_pieces(reply.reasoning_content, reply.content, calls)


def _sampled(reply: Reply) -> list[int]:
    """The reply's token ids as vLLM reports them: ``<|im_end|>`` closes all but a cut turn."""
    ids = stub_tokens.encode("".join(t for _, t in _pieces(reply)))
    return ids if _finish(reply) == "length" else [*ids, stub_tokens.EOS]


def completion_json(req: StubRequest, reply: Reply, cid: str) -> dict[str, Any]:
    """A chat completion; with token ids and logprobs where the request asked for them,
    in vLLM's shape (``prompt_token_ids``, ``choices[].token_ids``, ``choices[].logprobs``;
    null when not asked)."""
    want_ids, want_lps = stub_tokens.asked(req.json)
    prompt = stub_tokens.prompt_ids(req.json) if want_ids or want_lps else []
    sampled = _sampled(reply) if want_ids or want_lps else []
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning_content is not None:
        message["reasoning"] = reply.reasoning_content
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": t.id or f"call_{cid}_{i}", "type": "function",
             "function": {"name": t.name, "arguments": t.arguments_json}}
            for i, t in enumerate(reply.tool_calls)
        ]  # fmt: skip
    choice = {
        "index": 0, "message": message,
        "logprobs": stub_tokens.logprob_entries(sampled, len(prompt)) if want_lps else None,
        "finish_reason": _finish(reply), "token_ids": sampled if want_ids else None,
    }  # fmt: skip
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()),
        "model": reply.model or _model(req), "choices": [choice],
        "usage": _usage(req, reply, prompt, sampled),
        "prompt_token_ids": prompt if want_ids else None,
    }  # fmt: skip


def _model(req: StubRequest) -> str:
    return str(req.json.get("model", "stub")) if isinstance(req.json, dict) else "stub"


def _finish(reply: Reply) -> str | None:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def stream_payloads(req: StubRequest, reply: Reply, cid: str) -> list[str]:
    """The chunk events of ``reply`` as a vLLM chat stream, ``[DONE]`` included.

    Token data as vLLM streams it when asked: ``prompt_token_ids`` in the first chunk
    only, each later chunk's own ``token_ids`` and logprob entries, including chunks
    whose ``delta`` is empty (tokens the parsers swallow, and ``<|im_end|>``); the
    usage chunk has ``choices: []``. Not asked: the same keys, null.
    """
    head = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": reply.model or _model(req),
    }
    want_ids, want_lps = stub_tokens.asked(req.json)
    prompt = stub_tokens.prompt_ids(req.json) if want_ids or want_lps else []
    position = len(prompt)
    sampled: list[int] = []

    def chunk(delta: dict[str, Any], text: str = "", finish: str | None = None) -> dict[str, Any]:
        nonlocal position
        ids = stub_tokens.encode(text) if text else []
        if finish in ("stop", "tool_calls"):
            ids.append(stub_tokens.EOS)
        sampled.extend(ids)
        lps = stub_tokens.logprob_entries(ids, position) if want_lps else None
        position += len(ids)
        choice = {"index": 0, "delta": delta, "logprobs": lps, "finish_reason": finish,
                  "token_ids": ids if want_ids else None}  # fmt: skip
        return {**head, "choices": [choice]}

    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}  # fmt: skip
    out: list[dict[str, Any]] = [
        {**head, "choices": [first], "prompt_token_ids": prompt if want_ids else None}
    ]
    calls = -1
    for kind, text in _pieces(reply):
        if kind == "frame" and text.lstrip("\n").startswith("<tool_call>"):
            calls += 1
            t = reply.tool_calls[calls]
            first_call = {"index": calls, "id": t.id or f"call_{cid}_{calls}", "type": "function",
                          "function": {"name": t.name, "arguments": ""}}  # fmt: skip
            out.append(chunk({"tool_calls": [first_call]}, text))
        elif kind == "frame":
            out.append(chunk({}, text))
        else:
            for part in split_text(text, reply.chunks):
                delta: dict[str, Any] = (
                    {"tool_calls": [{"index": calls, "function": {"arguments": part}}]}
                    if kind == "args"
                    else {"reasoning" if kind == "reasoning" else "content": part}
                )
                out.append(chunk(delta, part))
    finish = _finish(reply)
    if finish == "length" and len(out) > 1:  # a cut turn ends on its last token's chunk
        out[-1]["choices"][0]["finish_reason"] = finish
    else:  # else on the chunk of ``<|im_end|>``
        out.append(chunk({}, "", finish))
    opts = req.json.get("stream_options") if isinstance(req.json, dict) else None
    if isinstance(opts, dict) and opts.get("include_usage"):
        out.append({**head, "choices": [], "usage": _usage(req, reply, prompt, sampled)})
    return [*(orjson.dumps(e).decode() for e in out), "[DONE]"]


def fast_bodies(fast: Fast) -> tuple[bytes, list[bytes]]:
    """The JSON body and the SSE events (``[DONE]`` included) :class:`Fast` sends, built once."""
    req = StubRequest(0, "POST", "/v1/chat/completions", {}, b"", {"model": "stub"})
    json_body = orjson.dumps(completion_json(req, Reply(content=fast.content), "fast"))
    head = {"id": "fast", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
    events = [
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "finish_reason": None,
                }
            ],
        }
    ]
    for _ in range(fast.stream_chunks - 3):
        events.append(
            {
                **head,
                "choices": [
                    {"index": 0, "delta": {"content": fast.chunk_text}, "finish_reason": None}
                ],
            }
        )
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": fast.stream_chunks,
        "total_tokens": fast.stream_chunks + 10,
    }
    events.append({**head, "choices": [], "usage": usage})
    stream = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    stream.append(b"data: [DONE]\n\n")
    return json_body, stream


def fast_token_bodies(fast: Fast) -> tuple[bytes, list[bytes]]:
    """:class:`Fast`'s JSON body and stream as vLLM sends them when asked for token data:
    ``fast.prompt_tokens`` prompt ids, and an id and a logprob entry per sampled token."""
    prompt = [16 + (i * 7) % 1900 for i in range(fast.prompt_tokens)]
    n = fast.stream_chunks - 3
    sampled = [16 + (i * 13) % 1900 for i in range(n)] + [stub_tokens.EOS]
    text = fast.chunk_text
    entries = [
        {"token": text, "logprob": stub_tokens.logprob(t, i), "bytes": list(text.encode()),
         "top_logprobs": []}
        for i, t in enumerate(sampled)
    ]  # fmt: skip
    usage = {"prompt_tokens": len(prompt), "completion_tokens": len(sampled),
             "total_tokens": len(prompt) + len(sampled)}  # fmt: skip
    message = {"role": "assistant", "content": text * n}
    json_body = orjson.dumps({
        "id": "fast", "object": "chat.completion", "created": 0, "model": "stub",
        "choices": [{"index": 0, "message": message, "logprobs": {"content": entries},
                     "finish_reason": "stop", "token_ids": sampled}],
        "usage": usage, "prompt_token_ids": prompt,
    })  # fmt: skip
    head = {"id": "fast", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}  # fmt: skip
    events: list[dict[str, Any]] = [{**head, "choices": [first], "prompt_token_ids": prompt}]
    for i, tok in enumerate(sampled):
        last = i == len(sampled) - 1
        events.append({**head, "choices": [{
            "index": 0, "delta": {} if last else {"content": text},
            "logprobs": {"content": [entries[i]]}, "finish_reason": "stop" if last else None,
            "token_ids": [tok],
        }]})  # fmt: skip
    events.append({**head, "choices": [], "usage": usage})
    stream = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    stream.append(b"data: [DONE]\n\n")
    return json_body, stream
