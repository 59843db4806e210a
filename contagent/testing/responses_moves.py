"""The stub's :class:`~contagent.testing.llm_moves.Reply` as an OpenAI Responses-API answer.

``POST .../responses`` requests get a ``response`` object (JSON) or, with
``"stream": true``, the event stream a Responses server sends: ``response.created``,
each output item added / its deltas / done, then ``response.completed`` (or
``response.incomplete`` when the reply's finish reason is ``length``) carrying
the whole response. Reasoning comes as vLLM's Responses server sends it: a ``reasoning``
item whose text is one ``reasoning_text`` content part (no summary, no encrypted content),
streamed as ``reasoning_text`` deltas, so an agent echoes back what it would echo to vLLM.
Pure functions, so tests can feed them to the proxy's parsers.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from contagent.testing.llm_moves import Reply, StubRequest, split_text
from contagent.wire.responses import is_responses_path
from contagent.wire.translate.responses_reply import reasoning_item


def is_responses(req: StubRequest) -> bool:
    return is_responses_path(req.path)


def _usage(req: StubRequest, reply: Reply) -> dict[str, Any]:
    if reply.usage is not None:
        u = dict(reply.usage)
        inp = u.get("input_tokens", u.get("prompt_tokens", 0))
        out = u.get("output_tokens", u.get("completion_tokens", 0))
    else:
        out_chars = len(reply.content or "") + len(reply.reasoning_content or "")
        out_chars += sum(len(t.name) + len(t.arguments_json) for t in reply.tool_calls)
        inp, out = max(1, len(req.body) // 4), max(1, out_chars // 4)
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }


def output_items(reply: Reply, rid: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.reasoning_content is not None:
        items.append(reasoning_item(f"rs_{rid}", reply.reasoning_content, "completed"))
    if reply.content is not None:
        items.append(
            {
                "type": "message",
                "id": f"msg_{rid}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.content, "annotations": []}],
            }
        )
    for i, t in enumerate(reply.tool_calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{rid}_{i}",
                "call_id": t.id or f"call_{rid}_{i}",
                "name": t.name,
                "arguments": t.arguments_json,
                "status": "completed",
            }
        )
    return items


def response_json(req: StubRequest, reply: Reply, rid: str) -> dict[str, Any]:
    """The ``response`` object: ``incomplete`` when the reply's finish reason is ``length``."""
    cut = reply.finish_reason == "length"
    body = req.json if isinstance(req.json, dict) else {}
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "model": reply.model or str(body.get("model", "stub")),
        "output": output_items(reply, rid),
        "previous_response_id": body.get("previous_response_id"),
        "usage": _usage(req, reply),
    }


def _reasoning_events(event: Any, item: dict[str, Any], n: int, chunks: int) -> list[Any]:
    """A reasoning item's text as vLLM streams it: one ``reasoning_text`` part's deltas."""
    text = item["content"][0]["text"]
    where = {"item_id": item["id"], "output_index": n, "content_index": 0}
    out = [event("response.content_part.added", part={"text": "", "type": "reasoning_text"},
                 **where)]  # fmt: skip
    out += [
        event("response.reasoning_text.delta", delta=p, **where) for p in split_text(text, chunks)
    ]
    out.append(event("response.reasoning_text.done", text=text, **where))
    out.append(event("response.content_part.done", part=item["content"][0], **where))
    return out


def response_events(req: StubRequest, reply: Reply, rid: str) -> list[tuple[str, str]]:
    """The stream as (event name, JSON data) pairs; the last one carries the whole response."""
    full = response_json(req, reply, rid)
    seq = iter(range(1 << 30))

    def event(etype: str, **fields: Any) -> tuple[str, str]:
        return etype, orjson.dumps({"type": etype, "sequence_number": next(seq), **fields}).decode()

    started = {**full, "status": "in_progress", "output": [], "usage": None}
    out = [event("response.created", response=started)]
    out.append(event("response.in_progress", response=started))
    for n, item in enumerate(full["output"]):
        kind = item["type"]
        empty = {**item, "status": "in_progress"}
        if kind == "message":
            empty["content"] = []
        elif kind == "function_call":
            empty["arguments"] = ""
        elif kind == "reasoning":
            empty["content"] = None
        out.append(event("response.output_item.added", output_index=n, item=empty))
        if kind == "reasoning":
            out += _reasoning_events(event, item, n, reply.chunks)
        if kind == "message":
            text = item["content"][0]["text"]
            for part in split_text(text, reply.chunks):
                out.append(
                    event(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=n,
                        content_index=0,
                        delta=part,
                    )
                )
        elif kind == "function_call":
            for part in split_text(item["arguments"], reply.chunks):
                out.append(
                    event(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=n,
                        delta=part,
                    )
                )
        out.append(event("response.output_item.done", output_index=n, item=item))
    final = "response.incomplete" if full["status"] == "incomplete" else "response.completed"
    out.append(event(final, response=full))
    return out
