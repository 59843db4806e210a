"""Variants of the agents' recorded requests that make the tier's random model answer in text
and call tools, so that the token route's comparison with vLLM's own routes covers both.

Greedy, the tiny model thinks for the whole 48-token answer of every recorded request (Qwen3's
template thinks unless told not to), so the recorded requests alone show neither a tool call
nor a text answer. Each variant sets top-level fields that vLLM's own routes read, and nothing
else (:meth:`tests.vllm.agent_fixtures.Recorded.varied`):

- thinking off (Messages ``thinking: {"type": "disabled"}``, Responses ``reasoning: {"effort":
  "none"}``): a text answer, cut at the token limit;
- a forced tool choice (Messages ``any`` and a named ``tool``; Responses ``required`` and a
  named ``function``), with thinking off: with thinking on vLLM starts the call's grammar only
  after the reasoning ends, which the random model never reaches in 48 tokens. vLLM
  constrains the answer to ``<tool_call>{"name": <a tool>, "arguments": <JSON>}`` (the agents'
  tools are not strict, so the arguments may be any JSON value), so the random model calls a
  tool. Greedy, it writes arguments that never end (a string or a number) until the limit: the
  stream holds the call as far as it got, the JSON answer its raw text (vLLM's hermes parser
  does not parse a cut call; its own routes answer so as well);
- a named function with a logit bias toward ``""`` and ``<|im_end|>`` (Responses only: the
  Messages API has no logit bias): the arguments are the empty string, and the model ends the
  call and the answer itself;
- Claude Code's first request naming its ``DeferredToolPlaceholder`` tool: greedy, the model
  writes ``true`` as the arguments and ends the call, so the stream holds a whole tool call
  (``stop_reason: tool_use``). That request's JSON answer is not compared: vLLM's own route
  answers it with a 400 (:data:`NATIVE_REFUSAL`).

:data:`SHOWS` says what each variant's greedy answer holds, JSON and streamed, so that a model
or template change that stops a variant from calling a tool fails rather than passing unseen.
Replayed once more as sent (:func:`as_sent`: sampled, for token samples), a forced call stops
where the grammar's fixed head of the call ends.
"""

from __future__ import annotations

import json
from typing import Any

from tests.vllm.agent_fixtures import CLAUDE_CODE, CODEX, Recorded
from tests.vllm.conversations import Meta

_NO_THINKING = {"thinking": {"type": "disabled"}}
_NO_REASONING = {"reasoning": {"effort": "none"}}

#: (JSON, streamed): the content block or output item types of the greedy answer, and its stop
#: reason or status; None where the JSON answer is not compared
SHOWS: dict[str, tuple[tuple[list[str], str] | None, tuple[list[str], str]]] = {
    "claude_code-turn2-no-thinking": ((["text"], "max_tokens"), (["text"], "max_tokens")),
    "claude_code-turn2-any": ((["text"], "max_tokens"), (["tool_use"], "max_tokens")),
    "claude_code-turn2-tool": ((["text"], "max_tokens"), (["tool_use"], "max_tokens")),
    "claude_code-turn1-complete": (None, (["tool_use"], "tool_use")),
    "codex-turn2-no-reasoning": ((["message"], "incomplete"), (["message"], "incomplete")),
    "codex-turn2-required": ((["message"], "incomplete"), (["function_call"], "incomplete")),
    "codex-turn2-function": ((["function_call"], "completed"), (["function_call"], "completed")),
}
#: the variants whose answer a grammar constrained (a forced tool choice)
FORCED = frozenset(n for n in SHOWS if "thinking" not in n and "reasoning" not in n)
#: replayed as sent (sampled, no longer greedy), a forced call's arguments may run on as any
#: JSON value to the token limit, and an answer cut by the limit is never trained on; so a
#: forced variant as sent stops where the grammar's fixed head of the call ends (a seed would
#: make its whole call repeatable, but the CPU build's engine dies on a seeded request whose
#: prompt takes more than one prefill chunk: "CPU Generator does not use offset")
ARGUMENTS = '"arguments": '
#: vLLM's own Messages route fails to build a ``tool_use`` block whose arguments are not a JSON
#: object (its block model types ``input`` as a dict), and answers 400 with this; its stream
#: sends the same call, as the token route does JSON and streamed
NATIVE_REFUSAL = "Input should be a valid dictionary"


def _token_id(meta: Meta, text: str) -> int:
    vocab = json.loads((meta.model_dir / "tokenizer.json").read_text())
    added = {a["content"]: a["id"] for a in vocab["added_tokens"]}
    return int(added.get(text, vocab["model"]["vocab"].get(text, -1)))


def variants(meta: Meta) -> dict[str, Recorded]:
    """Every variant by its id (the names of :data:`SHOWS`)."""
    cc, codex = CLAUDE_CODE[1], CODEX[1]
    bias = {str(_token_id(meta, t)): 100 for t in ('""', "<|im_end|>")}
    assert "-1" not in bias, "the tokenizer has no token for the empty string or the end"
    made = [
        cc.varied("no-thinking", **_NO_THINKING),
        cc.varied("any", **_NO_THINKING, tool_choice={"type": "any"}),
        cc.varied("tool", **_NO_THINKING, tool_choice={"type": "tool", "name": "Bash"}),
        CLAUDE_CODE[0].varied(
            "complete",
            **_NO_THINKING,
            tool_choice={"type": "tool", "name": "DeferredToolPlaceholder"},
        ),
        codex.varied("no-reasoning", **_NO_REASONING),
        codex.varied("required", **_NO_REASONING, tool_choice="required"),
        codex.varied(
            "function",
            **_NO_REASONING,
            logit_bias=bias,
            tool_choice={"type": "function", "name": "exec_command"},
        ),
    ]
    out = {r.id: r for r in made}
    assert out.keys() == SHOWS.keys()
    return out


def as_sent(req: Recorded, stop: str, limit: int) -> dict[str, Any]:
    """The variant's body as :meth:`Recorded.ending` makes it, a forced call's stopped at
    :data:`ARGUMENTS` too."""
    body = req.ending(stop, limit)
    if req.id in FORCED:
        key = "stop_sequences" if req.agent == "claude_code" else "stop"
        body[key] = [*body[key], ARGUMENTS]
    return body


def summary(answer: dict[str, Any] | list[dict[str, Any]]) -> tuple[list[str], str]:
    """(the block or item types, the stop reason or status) of a Messages or Responses answer,
    JSON (a dict) or streamed (its events)."""
    if isinstance(answer, dict):
        if answer.get("object") == "response":
            return [i["type"] for i in answer["output"]], answer["status"]
        return [b["type"] for b in answer["content"]], answer["stop_reason"]
    kinds = [e.get("type") for e in answer]
    if "message_start" in kinds:
        blocks = [e["content_block"]["type"] for e in answer if e["type"] == "content_block_start"]
        (stop,) = [e["delta"]["stop_reason"] for e in answer if e["type"] == "message_delta"]
        return blocks, stop
    items = [e["item"]["type"] for e in answer if e["type"] == "response.output_item.added"]
    (last,) = [e["response"] for e in answer if e["type"] == "response.completed"]
    return items, last["status"]
