"""Replaying the recorded agent requests against the real server, and comparing what came back.

Two routes answer each request: vLLM's own ``/v1/messages`` or ``/v1/responses``, and the
recording proxy's token route in front of the same server. What a client receives from
each is compared field by field, except what vLLM draws at random per answer
(:data:`RANDOM`: ids, timestamps, thinking signatures), and with each run of deltas of one
content part joined (:func:`coalesced`): a stream is cut into deltas at the engine's pace,
on either route.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from contagent.rawlog.read import RawRollout, read_exchanges

#: Fields vLLM fills at random per answer, so the two routes cannot agree on them.
RANDOM = frozenset({"id", "signature", "created_at", "item_id", "call_id"})


def masked(value: Any) -> Any:
    """``value`` with :data:`RANDOM` fields masked and each float tagged as one: Python's
    ``0 == 0.0`` would hide a ``0`` sent where vLLM sends ``0.0``, which a client reads as
    another JSON text."""
    if isinstance(value, dict):
        return {k: ("<random>" if k in RANDOM and v else masked(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, float):
        return ("float", value)
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
        assert resp.headers["content-type"].startswith("text/event-stream"), path
        return [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]


def stream_events(lines: list[str]) -> list[dict[str, Any]]:
    """A Messages or Responses stream's events (each data payload names its type)."""
    return [json.loads(line) for line in lines if line != "[DONE]"]


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


def settled(log: Path, timeout_s: float = 30.0) -> RawRollout:
    """``log`` read once every request has its outcome (the proxy writes it as the exchange
    ends, which can be just after the client has the last byte)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        raw = read_exchanges(log)
        if raw.requests and raw.requests.keys() == raw.outcomes.keys():
            return raw
        time.sleep(0.1)
    raise AssertionError(f"{log}: requests without outcomes after {timeout_s} s")
