"""Reading a raw log: its SHA-256 (hashed on another thread for a large log) and a log that
grows while it is read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent.errors import ContagentError
from contagent.rawlog import read as rawlog
from contagent.rawlog import stream as logstream


def write_log(path: Path, lines: int, pad: int) -> bytes:
    recs = []
    for i in range(lines):
        body = {"messages": [{"role": "user", "content": "x" * pad}]}
        recs.append({"index": i, "type": "request", "method": "POST", "path": "/p", "body": body})
        recs.append({"index": i, "type": "outcome", "outcome": "completed"})
    data = b"".join(orjson.dumps(r) + b"\n" for r in recs)
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("pad", [10, 300_000])  # a small log, and one hashed on a thread
def test_the_digest_is_the_record_streams_sha256(tmp_path: Path, pad: int) -> None:
    data = write_log(tmp_path / "exchanges.jsonl", 5, pad)
    raw = rawlog.read_exchanges(tmp_path / "exchanges.jsonl")
    assert raw.sha256 == hashlib.sha256(data).hexdigest() == raw.sha256
    assert raw.size == len(data) and sorted(raw.requests) == list(range(5))


def shrunk_stat(monkeypatch: pytest.MonkeyPatch, by: int) -> None:
    """The file looks ``by`` bytes shorter when opened than it is when read: it grew."""
    real = os.fstat

    def fstat(fd: int) -> Any:
        st = real(fd)
        return os.stat_result((*st[:6], st.st_size - by, *st[7:]))

    monkeypatch.setattr(logstream.os, "fstat", fstat)


def test_a_log_that_grows_while_read_is_read_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_log(tmp_path / "exchanges.jsonl", 3, 100)
    shrunk_stat(monkeypatch, 200)
    assert logstream.read_log_bytes(tmp_path / "exchanges.jsonl") == data


def test_a_log_that_grows_past_the_limit_while_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_log(tmp_path / "exchanges.jsonl", 3, 100)
    shrunk_stat(monkeypatch, 200)
    with pytest.raises(ContagentError, match="raw-log limit"):
        logstream.read_log_bytes(tmp_path / "exchanges.jsonl", max_bytes=len(data) - 100)
