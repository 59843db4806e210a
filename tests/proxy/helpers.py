"""Helpers shared by the proxy tests (fixtures stay in conftest.py)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from contagent.proxy import RunningProxy
from contagent.rawlog.records import OutcomeRecord, RequestRecord

CLIENT_KEY = "sk-client-SECRET-0123456789"
UPSTREAM_KEY = "sk-upstream-SECRET-9876543210"


def client(proxy: RunningProxy, rollout_id: str = "r1", **kw: Any) -> openai.OpenAI:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", 20)
    return openai.OpenAI(base_url=proxy.rollout_base_url(rollout_id), api_key=CLIENT_KEY, **kw)


def json_stream_error(c: openai.OpenAI, messages: list[dict[str, Any]]) -> None:
    """Three exchanges of the common kinds: JSON, a stream, and one the upstream refuses."""
    c.chat.completions.create(model="m", messages=messages)
    list(c.chat.completions.create(model="m", messages=messages, stream=True))
    with pytest.raises(openai.APIStatusError):
        c.chat.completions.create(model="m", messages=messages)


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every line of a raw log, parsed and validated against the record models."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), "log must end with a complete line"
    out = []
    for line in data.splitlines():
        rec = orjson.loads(line)
        model = RequestRecord if rec["type"] == "request" else OutcomeRecord
        model.model_validate(rec)  # raises on any field the contract does not allow
        out.append(rec)
    return out


def exchanges(
    record_dir: Path, rollout_id: str
) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(request, outcome) pairs by index; asserts dense indices and one outcome each at most."""
    recs = read_log(record_dir / rollout_id / "exchanges.jsonl")
    reqs = {r["index"]: r for r in recs if r["type"] == "request"}
    outs: dict[int, dict[str, Any]] = {}
    for r in recs:
        if r["type"] == "outcome":
            assert r["index"] not in outs, f"two outcomes for index {r['index']}"
            assert r["index"] in reqs, "outcome before its request"
            outs[r["index"]] = r
    assert sorted(reqs) == list(range(len(reqs))), "indices must be dense from 0"
    return [(reqs[i], outs.get(i)) for i in range(len(reqs))]


class Resp:
    def __init__(self, status: int, body: bytes) -> None:
        self.status_code = status
        self.content = body

    def json(self) -> Any:
        return orjson.loads(self.content)


def http(method: str, url: str, *, json: Any = None, content: bytes | None = None,
         headers: dict[str, str] | None = None, timeout: float = 20) -> Resp:  # fmt: skip
    """A plain HTTP/1.1 request (for what the openai client cannot send, e.g. odd paths)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    body = orjson.dumps(json) if json is not None else content
    hdrs = dict(headers or {})
    if json is not None:
        hdrs.setdefault("content-type", "application/json")
    try:
        conn.request(
            method, parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=hdrs
        )
        r = conn.getresponse()
        return Resp(r.status, r.read())
    finally:
        conn.close()


def raw_address(proxy: RunningProxy, rollout_id: str = "r1") -> tuple[str, int, str]:
    """Host, port and ``/r/<id>/v1`` path, for tests that speak HTTP over a bare socket."""
    from urllib.parse import urlsplit

    url = urlsplit(proxy.rollout_base_url(rollout_id))
    assert url.hostname is not None and url.port is not None
    return url.hostname, url.port, url.path


def read_all(sock: socket.socket, until: bytes = b"") -> bytes:
    """What the peer sends until it closes (or until ``until`` shows up)."""
    out = bytearray()
    while not (until and until in out):
        got = sock.recv(1 << 20)
        if not got:
            break
        out += got
    return bytes(out)


def raw_exchange(
    proxy: RunningProxy, payload: bytes, until: bytes = b"", timeout: float = 10
) -> bytes:
    """Send raw bytes on a new connection; what comes back, as :func:`read_all` reads it."""
    host, port, _ = raw_address(proxy)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(payload)
        return read_all(sock, until)


def raw_post(path: str, body: bytes, extra: str = "", version: str = "1.1") -> bytes:
    """The bytes of a JSON POST; ``extra`` holds more header lines, each ending in CRLF."""
    return (
        f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def post_answer(proxy: RunningProxy, route: str, body: Any) -> tuple[bytes, bytes]:
    """The head and body (de-chunked) of the proxy's answer to ``body`` posted as JSON to
    ``route`` of rollout r1, on a connection of its own, as bytes on the wire."""
    request = raw_post(raw_address(proxy)[2] + route, orjson.dumps(body), "Connection: close\r\n")
    head, _, payload = raw_exchange(proxy, request, timeout=20).partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        payload = dechunk(payload)
    return head, payload


def content_type(head: bytes) -> bytes:
    """The ``Content-Type`` of a response head (exactly one must be there)."""
    [line] = [h for h in head.split(b"\r\n") if h.lower().startswith(b"content-type:")]
    return line.partition(b":")[2].strip()


def dechunk(rest: bytes) -> bytes:
    """The payload of a chunked HTTP body."""
    data = b""
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        data += rest[:n]
        rest = rest[n + 2 :]
    return data


def wait_for(pred, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def fail_outcomes(
    proxy: RunningProxy, monkeypatch: Any, only: str | None = None
) -> dict[str, bool]:
    """Make the proxy's outcome appends fail (as on a full disk) while ``flag["on"]``,
    for every rollout or ``only`` one."""
    from contagent.proxy.recorder import RecordError

    recorder = proxy.proxy.recorder
    real_append = recorder.append
    flag = {"on": True}

    def append(rollout_id: str, record: dict[str, Any]) -> None:
        if flag["on"] and record["type"] == "outcome" and only in (None, rollout_id):
            raise RecordError("cannot append: No space left on device")
        real_append(rollout_id, record)

    monkeypatch.setattr(recorder, "append", append)
    return flag


def write_result(records: Path, rollout: str) -> None:
    """A passed ``result.json`` for rollout ``rollout`` of ``records`` (so that it exports)."""
    from contagent.rawlog.result import RolloutResult

    result = RolloutResult(rollout_id=rollout, model="m", experiment="t", status="passed", passed=True,
                           reward=1.0, stop_condition="finished")  # fmt: skip
    (records / rollout / "result.json").write_text(result.model_dump_json())


def rewrite_record(log: Path, index: int, kind: str, change: Any) -> None:
    """Apply ``change`` to the record of ``kind`` (request or outcome) and ``index`` in the
    raw log ``log``, in place (a test's mutation of the log)."""
    lines = []
    for line in log.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["index"] == index and rec["type"] == kind:
            change(rec)
        lines.append(orjson.dumps(rec))
    log.write_bytes(b"\n".join(lines) + b"\n")


def export_one_and_validate(records: Path, out: Path) -> dict[str, Any]:
    """Export a record dir of one rollout with the real CLI, prove the export with
    ``contagent validate``, and return that rollout's row."""
    import json

    from tests.helpers import cli, read_rows

    exp = cli("export", str(records), "--out", str(out), "--filter", "all", timeout=120)
    assert exp.returncode == 0, exp.stderr
    [row] = read_rows(out / "results.jsonl")
    val = cli("validate", str(out / "results.jsonl"), "--json", timeout=120)
    assert val.returncode == 0 and json.loads(val.stdout)["violations"] == [], val.stdout
    return row


def slow_outcome_writes(proxy: RunningProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make writing an outcome take 0.3 s, as a slow disk would: a proxy that sent the end of
    an answer before its record was on disk would now show it."""
    recorder = proxy.proxy.recorder
    real_append = recorder.append

    def slow_append(rollout_id: str, record: dict[str, Any]) -> None:
        if record["type"] == "outcome":
            time.sleep(0.3)
        real_append(rollout_id, record)

    monkeypatch.setattr(recorder, "append", slow_append)
