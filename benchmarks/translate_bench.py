"""CPU the token route adds per streamed answer: translating chat chunks to Messages and
Responses events.

Usage::

    python benchmarks/translate_bench.py [--tokens 500] [--rounds 5]

A streamed chat answer of N tokens as vLLM sends it with token data (one chunk per token,
``token_ids`` and a logprob entry in each, usage on every chunk as the Messages
translation asks): a thinking part, then text. Each round parses every chunk's JSON (what
token capture on chat completions already does, the baseline) and, separately, parses and
translates every chunk into the events the client receives and serialises them
(:class:`MessagesEvents`, :class:`ResponsesEvents`). Printed: the median CPU per answer of
each, and the translation's part, the figure the token route adds beside chat token
capture. Nothing else runs: no sockets, no proxy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import orjson

from contagent.wire.translate.anthropic_events import MessagesEvents
from contagent.wire.translate.responses_events import ResponsesEvents
from contagent.wire.translate.responses_reply import ReplyContext


def answer_chunks(tokens: int) -> list[bytes]:
    """The ``data`` payloads of one streamed answer: a role chunk, ``tokens`` token chunks
    (a quarter reasoning, the rest text), the usage chunk and ``[DONE]``."""

    def chunk(delta: dict[str, Any], done: int, finish: str | None = None) -> bytes:
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": {
                "content": [{"token": "x", "logprob": -0.5, "bytes": [120], "top_logprobs": []}]
            },
            "finish_reason": finish,
            "stop_reason": None,
            "token_ids": [1000 + done],
        }
        usage = {"prompt_tokens": 2000, "completion_tokens": done, "total_tokens": 2000 + done}
        body = {
            "id": "chatcmpl-b",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [choice],
            "usage": usage,
        }
        return json.dumps(body).encode()

    out = [chunk({"role": "assistant", "content": ""}, 0)]
    for i in range(1, tokens + 1):
        delta = {"reasoning": " word"} if i <= tokens // 4 else {"content": " word"}
        out.append(chunk(delta, i, "stop" if i == tokens else None))
    usage = {"prompt_tokens": 2000, "completion_tokens": tokens, "total_tokens": 2000 + tokens}
    out.append(
        json.dumps(
            {"id": "chatcmpl-b", "object": "chat.completion.chunk", "choices": [], "usage": usage}
        ).encode()
    )
    out.append(b"[DONE]")
    return out


def _parse(chunks: list[bytes]) -> int:
    return sum(1 for c in chunks if c == b"[DONE]" or orjson.loads(c))


def _messages(chunks: list[bytes]) -> int:
    writer = MessagesEvents()
    return sum(
        len(e) for c in chunks for e in writer.feed("[DONE]" if c == b"[DONE]" else orjson.loads(c))
    )


def _responses(chunks: list[bytes]) -> int:
    writer = ResponsesEvents(
        ReplyContext(request={"model": "m", "input": "q"}, max_model_len=32768)
    )
    return sum(
        len(e) for c in chunks for e in writer.feed("[DONE]" if c == b"[DONE]" else orjson.loads(c))
    )


def _cpu_ms(work: Any, chunks: list[bytes], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.process_time()
        work(chunks)
        samples.append((time.process_time() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    chunks = answer_chunks(args.tokens)
    _messages(chunks), _responses(chunks)  # warm up
    parse = _cpu_ms(_parse, chunks, args.rounds)
    messages = _cpu_ms(_messages, chunks, args.rounds)
    responses = _cpu_ms(_responses, chunks, args.rounds)
    print(f"{args.tokens}-token streamed answer, median CPU of {args.rounds} rounds:")
    print(f"  parse chunks only (chat token capture's share)  {parse:7.3f} ms")
    print(
        f"  parse + Messages events                         {messages:7.3f} ms  (+{messages - parse:.3f} ms)"
    )
    print(
        f"  parse + Responses events                        {responses:7.3f} ms  (+{responses - parse:.3f} ms)"
    )


if __name__ == "__main__":
    main()
