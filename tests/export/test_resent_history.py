"""Reading a request line with the previous request's history reused gives exactly what a
whole parse gives, for every serialiser and every shape, adversarial ones included."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contagent.rawlog.resent import _NONCE, ResentHistory
from contagent.rawlog.stream import line_blocks
from tests.strategies import json_values

Dump = Callable[[Any], bytes]
SERIALISERS: dict[str, Dump] = {
    "orjson": orjson.dumps,
    "compact": lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode(),
    "spaced": lambda v: json.dumps(v).encode(),  # the json module's defaults: ", " and ASCII
}


def request(index: int, messages: Any, **extra: Any) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "index": index,
        "type": "request",
        "path": "/v1/chat/completions",
        "headers": extra.pop("headers", {"content-type": "application/json"}),
        "body": {"messages": messages, "model": "m", **extra},
        "stream": False,
    }


def outcome(index: int) -> dict[str, Any]:
    return {"index": index, "type": "outcome", "outcome": "completed", "response": {"x": 1}}


def log_of(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def read_both(
    data: bytes, cuts: list[int] | None = None
) -> tuple[list[Any], list[Any], ResentHistory]:
    """Each line as the reader gives it and as ``orjson.loads`` does (an exception's text
    in place of a record that does not parse), the log read in chunks cut at ``cuts``
    (default: one chunk), a block of lines at a time as the raw-log reader reads it."""
    reader = ResentHistory()
    got: list[Any] = []
    want: list[Any] = []
    for buf, start, stop in line_blocks(split_at(data, cuts or [])):
        reader.block(buf)
        while start < stop:
            end = buf.find(b"\n", start, stop)
            got.append(_outcome_of(lambda s=start, e=end: reader.loads(s, e)))
            want.append(_outcome_of(lambda b=buf, s=start, e=end: orjson.loads(b[s:e])))
            start = end + 1
    return got, want, reader


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at each offset of ``cuts`` (taken modulo its length), in order."""
    at = sorted({c % len(data) for c in cuts} | {0, len(data)}) if data else [0]
    return [data[a:b] for a, b in itertools.pairwise(at) if b > a]


def every_few(data: bytes, step: int) -> list[int]:
    return list(range(step, len(data), step))


def _outcome_of(parse: Callable[[], Any]) -> bytes | str:
    try:
        return orjson.dumps(parse())  # bytes: key order and types count too
    except orjson.JSONDecodeError as exc:
        return f"error: {exc}"


def msg(n: int, text: str = "t") -> dict[str, Any]:
    if n % 2:
        call = {"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return {"role": "assistant", "content": f"{text}{n} é \u2028", "tool_calls": [call]}
    return {"role": "tool", "tool_call_id": f"c{n - 1}", "content": f'out {n} "q" \\ \n'}


def growing(steps: int) -> list[list[Any]]:
    history: list[Any] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    out = []
    for n in range(steps):
        out.append(list(history))
        history += [msg(2 * n + 1), msg(2 * n + 2)]
    return out


@pytest.mark.parametrize("name", SERIALISERS)
def test_a_growing_history_is_reused_for_every_serialiser(name: str) -> None:
    dump = SERIALISERS[name]
    lines = []
    for i, messages in enumerate(growing(12)):
        lines += [dump(request(i, messages)), dump(outcome(i))]
    got, want, reader = read_both(log_of(lines))
    assert got == want
    assert reader.reused == 11  # every request after the first


@pytest.mark.parametrize("name", SERIALISERS)
def test_a_growing_responses_input_is_reused(name: str) -> None:
    lines = []
    for i, items in enumerate(growing(8)):
        rec = request(i, None)
        rec["path"] = "/v1/responses"
        rec["body"] = {"model": "m", "instructions": "sys", "input": items, "store": False}
        lines += [SERIALISERS[name](rec), orjson.dumps(outcome(i))]
    got, want, reader = read_both(log_of(lines))
    assert got == want
    assert reader.reused == 7


def test_a_log_that_moves_between_messages_and_input() -> None:
    history = growing(5)
    lines = []
    for i, items in enumerate(history):
        both = i == 2  # a body holding both arrays: messages is the one reused
        body = {"input": items} if i % 2 else {"messages": items}
        if both:
            body = {"input": items[:1], "messages": items}
        lines.append(orjson.dumps(request(i, None) | {"body": body}))
    got, want, _ = read_both(log_of(lines))
    assert got == want


def test_a_side_conversation_between_the_steps_is_followed_beside_the_agents() -> None:
    agent = growing(8)
    side = [[{"role": "system", "content": "summarise"}, *h[1:]] for h in growing(8)]
    lines = []
    for i in range(8):
        lines.append(orjson.dumps(request(2 * i, agent[i])))
        lines.append(orjson.dumps(request(2 * i + 1, side[i])))
    got, want, reader = read_both(log_of(lines))
    assert got == want
    assert reader.reused == 14  # every request but each conversation's first


def test_a_resent_identical_history_and_an_empty_one() -> None:
    first = growing(3)[2]
    lines = [orjson.dumps(request(i, m)) for i, m in enumerate([first, first, [], first, first])]
    got, want, reader = read_both(log_of(lines))
    assert got == want
    assert reader.reused >= 2


def test_a_history_changed_in_the_middle_is_parsed_whole() -> None:
    a = growing(6)[5]
    b = [*a[:3], {"role": "user", "content": "condensed"}, *a[3:]]
    c = [{**a[0], "content": "other system"}, *a[1:]]
    lines = [orjson.dumps(request(i, m)) for i, m in enumerate([a, b, c, a[:2], a])]
    got, want, _ = read_both(log_of(lines))
    assert got == want


@pytest.mark.parametrize(
    "line",
    [
        # the search key inside a header's key and value, with the history's own bytes after it
        b'{"index":1,"headers":{"x\\"messages":[{"role":"system","content":"sys"},1]},'
        b'"body":{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"go"},3]}}',
        # a second body wins in a whole parse, so it must win here too
        b'{"index":1,"body":{"messages":[{"role":"system","content":"sys"},'
        b'{"role":"user","content":"go"},3]},"body":{"messages":[0]}}',
        # a second messages key inside the body
        b'{"index":1,"body":{"messages":[{"role":"system","content":"sys"},'
        b'{"role":"user","content":"go"},3],"messages":"no"}}',
        # the history's bytes, then a value that is not a separator
        b'{"index":1,"body":{"messages":[{"role":"system","content":"sys"},'
        b'{"role":"user","content":"go"}3]}}',
        # a nonce-like string in the new part, and the very nonce as a later element
        b'{"index":1,"body":{"messages":[{"role":"system","content":"sys"},'
        b'{"role":"user","content":"go"},"contagent-resent-history-0",'
        + orjson.dumps(_NONCE)
        + b"]}}",
        # cut short (a torn write), and corrupt after the history
        b'{"index":1,"body":{"messages":[{"role":"system","content":"sys"},'
        b'{"role":"user","content":"go"},{"role":"us',
        b'{"index":1,"body":{"messages":[{"role":"system","content":"sys"},'
        b'{"role":"user","content":"go"}]}} trailing',
        # messages not a list, body not an object
        b'{"index":1,"body":{"messages":{"role":"system"}}}',
        b'{"index":1,"body":[{"messages":[{"role":"system","content":"sys"},'
        b'{"role":"user","content":"go"}]}]}',
        b"[1,2]",
    ],
)
def test_adversarial_lines_read_as_a_whole_parse_reads_them(line: bytes) -> None:
    first = orjson.dumps(
        request(0, [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}])
    )
    got, want, _ = read_both(log_of([first, line, first]))
    assert got == want


JSON = json_values(max_leaves=8, text_size=8)
EDITS = st.sampled_from(["append", "append", "append", "same", "drop", "edit", "new", "odd"])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(EDITS, st.lists(JSON, max_size=3), st.sampled_from(sorted(SERIALISERS))),
        max_size=10,
    ),
    st.sampled_from(["first", "after", "input"]),
)
def test_any_sequence_of_requests_reads_as_a_whole_parse(
    steps: list[tuple[str, list[Any], str]], order: str
) -> None:
    history: list[Any] = [{"role": "system", "content": "s"}]
    lines = []
    for i, (edit, values, name) in enumerate(steps):
        if edit == "append":
            history = history + values
        elif edit == "drop":
            history = history[:-1]
        elif edit == "edit" and history:
            history = [values, *history[1:]]
        elif edit == "new":
            history = values
        rec = request(i, history)
        if order == "after":
            rec["body"] = {"model": "m", "messages": history}
        elif order == "input":
            rec["body"] = {"model": "m", "input": history}
        if edit == "odd":
            rec["headers"] = {'"messages":[': orjson.dumps(history).decode()}
            rec["body"]["input"] = history
        lines.append(SERIALISERS[name](rec))
        lines.append(orjson.dumps(outcome(i)))
    got, want, _ = read_both(log_of(lines))
    assert got == want


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(EDITS, st.lists(JSON, max_size=3), st.sampled_from(sorted(SERIALISERS))),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(min_value=0), max_size=12),
)
def test_a_log_read_in_chunks_reads_and_reuses_as_one_read(
    steps: list[tuple[str, list[Any], str]], cuts: list[int]
) -> None:
    """Chunk edges anywhere (inside a prefix, a key, a separator, a line's newline) change
    neither what each line reads as nor which lines reuse their history."""
    history: list[Any] = [{"role": "system", "content": "s"}]
    lines = []
    for i, (edit, values, name) in enumerate(steps):
        history = history + values if edit != "new" else values
        lines += [SERIALISERS[name](request(i, history)), orjson.dumps(outcome(i))]
    data = log_of(lines)
    whole, want, one = read_both(data)
    got, _, chunked = read_both(data, cuts)
    assert got == whole == want
    assert chunked.reused == one.reused


@pytest.mark.parametrize("step", [1, 7, 64, 1000])
def test_every_request_reuses_its_history_across_chunk_edges(step: int) -> None:
    lines = []
    for i, messages in enumerate(growing(12)):
        lines += [orjson.dumps(request(i, messages)), orjson.dumps(outcome(i))]
    data = log_of(lines)
    got, want, reader = read_both(data, every_few(data, step))
    assert got == want
    assert reader.reused == 11
