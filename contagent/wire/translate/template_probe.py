"""The two decisions vLLM's Messages server makes by probing its chat template, made the
same way through the chat route.

- **Inline system messages** (``merge_inline_system``): vLLM renders
  ``[system, user, system, user]``; when the template raises (Qwen3's "System message must
  be at the beginning"), every system message inside ``messages`` is appended to the
  leading system prompt. Here the same conversation goes to the chat route with
  ``max_tokens: 1``: a 400 means the template refused it.
- **Disabled thinking** (``disabled_thinking_effort``): ``thinking: {"type": "disabled"}``
  becomes ``reasoning_effort: "none"``, or ``"low"`` when the template refuses ``none``
  or renders it the same as a real effort (then ``none`` does not turn thinking off).
  vLLM compares the rendered prompts of ``"Hi"`` under each effort; here the prompts'
  token ids come back from the chat route (``return_token_ids``).

The functions build the probe requests and read their answers; the caller sends them
(with the same ``chat_template`` its translated requests carry, since that is the template
that renders them).
"""

from __future__ import annotations

from typing import Any

#: The efforts vLLM compares ``none`` against, in its order.
PROBED_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def _probe(model: str, messages: list[dict[str, str]], chat_template: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": 1}
    if chat_template is not None:
        body["chat_template"] = chat_template
    return body


def merge_probe(model: str, chat_template: str | None = None) -> dict[str, Any]:
    """The chat request whose refusal means: merge inline system messages."""
    turns = [{"role": r, "content": "t"} for r in ("system", "user", "system", "user")]
    return _probe(model, turns, chat_template)


def merge_decision(status: int) -> bool | None:
    """Merge (True), keep in place (False) or unknown (None: the server failed)."""
    if status == 200:
        return False
    if status == 400:
        return True
    return None


def effort_probes(model: str, chat_template: str | None = None) -> dict[str, dict[str, Any]]:
    """effort -> the chat request rendering ``"Hi"`` under it, ``none`` first."""
    out: dict[str, dict[str, Any]] = {}
    for effort in ("none", *PROBED_EFFORTS):
        body = _probe(model, [{"role": "user", "content": "Hi"}], chat_template)
        body["reasoning_effort"] = effort
        body["return_token_ids"] = True
        out[effort] = body
    return out


def prompt_ids(status: int, answer: Any) -> list[int] | None:
    """The rendered prompt's ids in a probe's answer (None: refused or not reported)."""
    if status != 200 or not isinstance(answer, dict):
        return None
    ids = answer.get("prompt_token_ids")
    return ids if isinstance(ids, list) else None


def disabled_thinking_effort(prompts: dict[str, list[int] | None]) -> str:
    """``none``, unless the template refuses it or renders it as one of the real efforts."""
    none_prompt = prompts.get("none")
    if none_prompt is None:
        return "low"
    if any(prompts.get(effort) == none_prompt for effort in PROBED_EFFORTS):
        return "low"
    return "none"
