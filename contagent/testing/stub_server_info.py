"""What the stub answers about itself as vLLM 0.32 does, without consuming a move.

- **Top-logprob questions**: a chat completion of one token (``max_tokens: 1``) asking for
  ``top_logprobs`` is answered from one fixed next-token distribution, in the server's
  ``--logprobs-mode``: ``raw_logprobs`` (vLLM's default: before temperature),
  ``processed_logprobs`` (after it), ``raw_logits`` / ``processed_logits``. The shape is the
  real server's: ``logprobs.content[0]`` with ``token``, ``logprob``, ``bytes`` and
  ``top_logprobs``; ``return_tokens_as_token_ids`` spells tokens ``token_id:N``.
- **Render**: ``POST /v1/chat/completions/render`` answers ``sampling_params`` (the request's
  own values over the server's defaults) when the stub serves it (vLLM's
  ``--enable-scale-out``), else 404 as vLLM does.
"""

from __future__ import annotations

import math
from typing import Any

#: the stub's next-token logits: token id -> logit (peaked enough to tell the modes apart)
LOGITS: dict[int, float] = {101: 2.0, 102: 1.0, 103: 0.5, 104: 0.0, 105: -1.0, 106: -2.0}
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")
#: vLLM's neutral defaults, which a model's generation_config may replace
VLLM_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "presence_penalty": 0.0,
    "frequency_penalty": 0.0, "repetition_penalty": 1.0, "seed": None,
}  # fmt: skip


def is_top_logprob_question(method: str, path: str, body: Any) -> bool:
    return (
        method == "POST"
        and path.endswith("/chat/completions")
        and isinstance(body, dict)
        and body.get("max_tokens") == 1
        and body.get("logprobs") is True
        and isinstance(body.get("top_logprobs"), int)
        and body["top_logprobs"] > 0
    )


def _values(mode: str, temperature: float) -> dict[int, float]:
    scale = 1.0 / temperature if mode.startswith("processed") and temperature > 0 else 1.0
    logits = {t: v * scale for t, v in LOGITS.items()}
    if mode.endswith("logits"):
        return logits
    norm = math.log(sum(math.exp(v) for v in logits.values()))
    return {t: v - norm for t, v in logits.items()}


def top_logprob_answer(body: dict[str, Any], mode: str, index: int) -> dict[str, Any]:
    """The chat completion vLLM would send to a top-logprob question, in ``mode``."""
    temperature = body.get("temperature")
    values = _values(mode, float(temperature) if isinstance(temperature, (int, float)) else 1.0)
    as_ids = body.get("return_tokens_as_token_ids") is True

    def entry(tid: int) -> dict[str, Any]:
        text = f"token_id:{tid}" if as_ids else f"w{tid}"
        return {"token": text, "logprob": values[tid], "bytes": list(f"w{tid}".encode())}

    ranked = sorted(values, key=values.__getitem__, reverse=True)
    first = entry(ranked[0])
    first["top_logprobs"] = [entry(t) for t in ranked[: body["top_logprobs"]]]
    return {
        "id": f"chatcmpl-stub-probe-{index}", "object": "chat.completion", "created": 0,
        "model": body.get("model"),
        "choices": [{
            "index": 0, "message": {"role": "assistant", "content": f"w{ranked[0]}"},
            "logprobs": {"content": [first]}, "finish_reason": "length",
        }],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }  # fmt: skip


def render_answer(body: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """A render answer's ``sampling_params``: the request's values over ``defaults``."""
    sent = body if isinstance(body, dict) else {}
    params = {k: sent.get(k) if sent.get(k) is not None else v for k, v in defaults.items()}
    params["max_tokens"] = sent.get("max_tokens") or 2000
    params["logit_bias"] = sent.get("logit_bias")
    return {"request_id": "render-stub", "token_ids": [1, 2, 3], "sampling_params": params}


def _one_token_choice() -> dict[str, Any]:
    """The one choice of a probe's answer (``max_tokens: 1``)."""
    return {"index": 0, "message": {"role": "assistant", "content": "t"}, "finish_reason": "length"}


#: the roles of the inline-system probe (:mod:`contagent.wire.translate.template_probe`)
INLINE_SYSTEM_ROLES = ["system", "user", "system", "user"]


def is_inline_system_question(method: str, path: str, body: Any) -> bool:
    """The proxy's question whether the template takes a system message after the first."""
    if not isinstance(body, dict):
        return False
    messages = body.get("messages")
    return (
        method == "POST"
        and path.endswith("/chat/completions")
        and body.get("max_tokens") == 1
        and isinstance(messages, list)
        and [m.get("role") if isinstance(m, dict) else None for m in messages]
        == INLINE_SYSTEM_ROLES
    )


def inline_system_answer(refuses: bool) -> tuple[int, dict[str, Any]]:
    """(status, body): a template that refuses it raises, which vLLM answers with a 400."""
    if refuses:
        error = {
            "message": "System message must be at the beginning.",
            "type": "BadRequestError",
            "code": 400,
        }
        return 400, {"error": error}
    return 200, {"object": "chat.completion", "choices": [_one_token_choice()]}


def is_effort_question(method: str, path: str, body: Any) -> bool:
    """The proxy's question how the template renders ``"Hi"`` under one reasoning effort."""
    return (
        method == "POST"
        and path.endswith("/chat/completions")
        and isinstance(body, dict)
        and body.get("max_tokens") == 1
        and isinstance(body.get("reasoning_effort"), str)
        and body.get("return_token_ids") is True
        and body.get("messages") == [{"role": "user", "content": "Hi"}]
    )


def effort_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The rendered prompt's ids, as a template that turns thinking off for ``none``
    renders it (an empty think block opens the answer), the stub tokenizer's ids."""
    from contagent.testing.stub_tokens import encode

    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    if body["reasoning_effort"] == "none":
        prompt += "<think>\n\n</think>\n\n"
    ids = encode(prompt)
    return {
        "object": "chat.completion",
        "choices": [_one_token_choice()],
        "prompt_token_ids": ids,
        "usage": {"prompt_tokens": len(ids), "completion_tokens": 1, "total_tokens": 0},
    }
