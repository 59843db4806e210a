"""Token ids for the scripted stub, in the shapes vLLM returns them.

A byte-level stand-in tokenizer: each special token of the Qwen3 format is one
id, every other byte is ``BYTE_BASE + byte``. Prompts are rendered with a small
Qwen3-like template (``<|im_start|>role\\n...<|im_end|>\\n``, tool calls as
``<tool_call>\\n{...}\\n</tool_call>``, reasoning as ``<think>\\n...\\n</think>\\n\\n``)
and the sampled ids of a reply are its rendering as that template writes an
assistant turn, closed by ``<|im_end|>`` (vLLM's EOS) unless the turn was cut by
``length``. So the next prompt extends the previous prompt plus its sampled ids
exactly when the client sends the answer back as it came (its reasoning included),
as with a prefix-preserving template; dropping the reasoning breaks it, as
Qwen3's own template does.

Logprobs are a fixed function of the id and position, so tests can recompute them.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
           "<tool_call>", "</tool_call>")  # fmt: skip
IDS = {tok: i for i, tok in enumerate(SPECIAL)}
EOS = IDS["<|im_end|>"]
BYTE_BASE = 16
_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL) + ")")


def encode(text: str) -> list[int]:
    out: list[int] = []
    for part in _SPLIT.split(text):
        if part in IDS:
            out.append(IDS[part])
        elif part:
            out.extend(BYTE_BASE + b for b in part.encode())
    return out


def logprob(token: int, position: int) -> float:
    """The stub's "sampler" logprob of ``token`` at ``position`` (a peaked, fixed function)."""
    return -round(0.05 + 4.0 * abs(math.sin(token * 12.9898 + position * 78.233)), 6)


def _tool_call(name: str, arguments: str) -> str:
    return (
        '<tool_call>\n{"name": '
        + orjson.dumps(name).decode()
        + ', "arguments": '
        + arguments
        + "}\n</tool_call>"
    )


def assistant_pieces(
    reasoning: str | None, content: str | None, calls: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """An assistant turn as the template writes it, as ``(kind, text)`` pieces: ``reasoning``,
    ``content``, ``args`` (one call's arguments) and ``frame`` (text the server's parsers
    swallow: think tags, the tool-call wrapper)."""
    pieces: list[tuple[str, str]] = []
    if reasoning:
        pieces += [("frame", "<think>\n"), ("reasoning", reasoning), ("frame", "\n</think>\n\n")]
    if content:
        pieces.append(("content", content))
    for n, (name, arguments) in enumerate(calls):
        head, _, tail = _tool_call(name, "\x00").partition("\x00")
        sep = "\n" if n or content else ""
        pieces += [("frame", sep + head), ("args", arguments), ("frame", tail)]
    return pieces


def render_message(msg: dict[str, Any]) -> str:
    role = str(msg.get("role"))
    if role != "assistant":
        content = msg.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        return f"<|im_start|>{role}\n{content or ''}<|im_end|>\n"
    calls = [
        (str(c.get("function", {}).get("name")), str(c.get("function", {}).get("arguments")))
        for c in msg.get("tool_calls") or []
        if isinstance(c, dict)
    ]
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    body = "".join(t for _, t in assistant_pieces(reasoning, msg.get("content"), calls))
    return f"<|im_start|>assistant\n{body}<|im_end|>\n"


def prompt_ids(body: Any) -> list[int]:
    """The request's messages through the template, with the generation prompt."""
    messages = body.get("messages") if isinstance(body, dict) else None
    text = "".join(render_message(m) for m in messages or [] if isinstance(m, dict))
    return encode(text + "<|im_start|>assistant\n")


def logprob_entries(ids: list[int], start: int) -> dict[str, Any]:
    """vLLM's ``logprobs`` of a choice (``top_logprobs: 0``): one entry per sampled id."""
    return {
        "content": [
            {"token": f"<{t}>", "logprob": logprob(t, start + n), "bytes": [], "top_logprobs": []}
            for n, t in enumerate(ids)
        ]
    }


def asked(body: Any) -> tuple[bool, bool]:
    """Whether the request asked for token ids, and for logprobs."""
    if not isinstance(body, dict):
        return False, False
    return body.get("return_token_ids") is True, body.get("logprobs") is True
