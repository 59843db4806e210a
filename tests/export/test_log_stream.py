"""Reading a raw log a chunk at a time: the lines, the records, the digest and the limit are
what a whole read gives, at every chunk edge, and memory holds a few chunks, not the log."""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from pathlib import Path

import orjson
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from contagent.errors import ContagentError
from contagent.rawlog.read import parse_exchanges, parse_stream, read_exchanges
from contagent.rawlog.stream import LogStream, line_blocks, read_log_bytes
from tests.export.test_resent_history import growing, outcome, request, split_at


def lines_of(chunks: list[bytes]) -> list[bytes]:
    out = []
    for buf, start, stop in line_blocks(chunks):
        assert buf[stop - 1 : stop] == b"\n"
        out += bytes(buf[start:stop]).split(b"\n")[:-1]
    return out


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=20))
def test_line_blocks_give_every_line_once_wherever_the_chunks_end(
    data: bytes, cuts: list[int]
) -> None:
    want = data.split(b"\n")
    if want[-1] == b"":
        want.pop()
    assert lines_of(split_at(data, cuts)) == want


def log_bytes(steps: int, torn: bool = False, blank: bool = False) -> bytes:
    lines = []
    for i, messages in enumerate(growing(steps)):
        rec = request(i, messages, method="POST")
        rec["method"] = rec["body"].pop("method")
        lines += [orjson.dumps(rec), orjson.dumps(outcome(i))]
        if blank and i == 2:
            lines.append(b"  ")
    data = b"".join(line + b"\n" for line in lines)
    return data + b'{"index": 99, "type": "requ' if torn else data


def summary(path: Path, stream: LogStream) -> tuple[object, ...]:
    raw = parse_stream(stream)
    return raw.requests, raw.outcomes, raw.problems, raw.size, raw.sha256


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=5000),
    st.booleans(),
    st.booleans(),
)
def test_a_log_parses_alike_in_any_chunk_size(chunk: int, torn: bool, blank: bool) -> None:
    data = log_bytes(6, torn=torn, blank=blank)
    path = Path("x/exchanges.jsonl")
    whole = summary(path, LogStream(path, len(data), chunk=len(data) + 1, data=data))
    assert whole[-1] == hashlib.sha256(data).hexdigest() and whole[-2] == len(data)
    assert summary(path, LogStream(path, len(data), chunk=chunk, data=data)) == whole
    torn_at = 14 if blank else 13
    assert (("torn_line", f"line {torn_at} is torn (a write cut short)") in whole[2]) is torn


def _zst(data: bytes, declared: bool = True) -> bytes:
    out = io.BytesIO()
    cctx = zstandard.ZstdCompressor(level=3)
    with cctx.stream_writer(out, size=len(data) if declared else -1, closefd=False) as w:
        w.write(data)
    return out.getvalue()


@pytest.mark.parametrize("form", ["plain", "compacted", "undeclared"])
def test_a_file_read_in_small_chunks_gives_the_whole_reads_records(
    tmp_path: Path, form: str
) -> None:
    data = log_bytes(10, torn=True)
    path = tmp_path / ("exchanges.jsonl" if form == "plain" else "exchanges.jsonl.zst")
    path.write_bytes(data if form == "plain" else _zst(data, declared=form == "compacted"))
    want = parse_exchanges(path, data)
    got = parse_stream(LogStream(path, len(data), chunk=97))
    assert (got.requests, got.outcomes, got.problems) == (
        want.requests,
        want.outcomes,
        want.problems,
    )
    assert (got.size, got.sha256) == (len(data), hashlib.sha256(data).hexdigest())


def duplicates_log(lines: int, pad: int) -> bytes:
    """``lines`` outcome records of ``pad`` bytes each, all for index 0: parsed, only the
    first is kept, so what a reader holds at once is what its reading costs."""
    rec = orjson.dumps({"index": 0, "type": "outcome", "outcome": "completed", "e": "x" * pad})
    return (rec + b"\n") * lines


@pytest.mark.parametrize("form", ["plain", "compacted"])
def test_memory_holds_a_few_chunks_not_the_log(tmp_path: Path, form: str) -> None:
    data = duplicates_log(48, 1 << 20)  # 48 MiB of 1 MiB lines
    path = tmp_path / ("exchanges.jsonl" if form == "plain" else "exchanges.jsonl.zst")
    path.write_bytes(data if form == "plain" else _zst(data))
    tracemalloc.start()
    try:
        raw = read_exchanges(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert raw.sha256 == hashlib.sha256(data).hexdigest() and raw.size == len(data)
    assert len(raw.problems) == 48  # 47 duplicates, and no request for the outcome
    # at most four 4 MiB chunks (one read, one parsed, one queued for hashing, one hashed)
    # and a few lines: well under the 48 MiB a whole read holds
    assert peak < 32 << 20


def test_a_bomb_that_declares_no_size_is_refused_before_its_one_line_is_held(
    tmp_path: Path,
) -> None:
    bomb = tmp_path / "exchanges.jsonl.zst"
    bomb.write_bytes(_zst(b"{" + b"\0" * (64 << 20), declared=False))
    tracemalloc.start()
    try:
        with pytest.raises(ContagentError, match="more than 33554432 bytes, the raw-log limit"):
            read_exchanges(bomb, 32 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


@pytest.mark.parametrize("declared", [True, False])
def test_a_log_past_the_limit_is_refused_for_that_before_a_bad_line(
    tmp_path: Path, declared: bool
) -> None:
    data = b"not json\n" + log_bytes(4)
    path = tmp_path / "exchanges.jsonl.zst"
    path.write_bytes(_zst(data, declared=declared))
    with pytest.raises(ContagentError, match="raw-log limit"):
        read_exchanges(path, len(data) - 1)
    with pytest.raises(ContagentError, match=":1: malformed JSON"):
        read_exchanges(path, len(data))


def test_read_log_bytes_is_the_record_stream(tmp_path: Path) -> None:
    data = log_bytes(3, torn=True)
    (tmp_path / "exchanges.jsonl.zst").write_bytes(_zst(data, declared=False))
    assert read_log_bytes(tmp_path / "exchanges.jsonl.zst") == data
