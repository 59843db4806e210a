"""The raw log under concurrency, restarts, crashes and shutdowns; the CLI around it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contagent.proxy.recorder import Recorder, RecordError, scan_log
from contagent.testing.llm_stub import Reply, StubRequest, ToolCall
from tests.proxy.helpers import client, exchanges, read_log, wait_for

MSGS = [{"role": "user", "content": "hi"}]
CLI = [sys.executable, "-c", "from contagent.cli import main; main()"]


def test_concurrent_rollouts_write_separate_dense_logs(stub_factory, proxy_factory, tmp_path):
    def script(req: StubRequest) -> Reply:
        big = "x" * (20_000 if req.index % 3 == 0 else 10)  # long lines make torn writes likelier
        return Reply(content=big, tool_calls=[ToolCall("terminal", {"command": "ls"})], chunks=7)

    stub = stub_factory(script)
    proxy = proxy_factory(stub.url)
    rollouts, per_rollout = [f"roll-{i}" for i in range(8)], 12

    def agent(rid: str) -> None:
        c = client(proxy, rid)
        for step in range(per_rollout):
            msgs = [*MSGS, {"role": "user", "content": f"{rid} step {step}"}]
            if step % 2:
                list(c.chat.completions.create(model="m", messages=msgs, stream=True))
            else:
                c.chat.completions.create(model="m", messages=msgs)

    with ThreadPoolExecutor(len(rollouts)) as pool:
        list(pool.map(agent, rollouts))
    for rid in rollouts:
        pairs = exchanges(tmp_path / "records", rid)
        assert len(pairs) == per_rollout
        for step, (req, out) in enumerate(pairs):
            assert req["rollout_id"] == rid == out["rollout_id"]
            # arrival order: each agent waits for its previous answer, so index == step
            assert req["body"]["messages"][-1]["content"] == f"{rid} step {step}"
            assert out["outcome"] == "completed"
        kinds = [r["type"] for r in read_log(tmp_path / "records" / rid / "exchanges.jsonl")]
        assert kinds == ["request", "outcome"] * per_rollout


def test_restart_continues_indices(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()] * 5)
    first = proxy_factory(stub.url)
    c = client(first)
    c.chat.completions.create(model="m", messages=MSGS)
    c.chat.completions.create(model="m", messages=MSGS)
    first.stop()
    second = proxy_factory(stub.url)
    client(second).chat.completions.create(model="m", messages=MSGS)
    client(second, "other").chat.completions.create(model="m", messages=MSGS)
    assert [r["index"] for r, _ in exchanges(tmp_path / "records", "r1")] == [0, 1, 2]
    assert [r["index"] for r, _ in exchanges(tmp_path / "records", "other")] == [0]


def test_second_proxy_on_a_rollout_being_recorded_is_refused(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply()] * 5)
    first, second = proxy_factory(stub.url), proxy_factory(stub.url)  # same record dir
    client(first).chat.completions.create(model="m", messages=MSGS)
    with pytest.raises(openai.InternalServerError) as err:
        client(second).chat.completions.create(model="m", messages=MSGS)
    assert "being recorded by another process" in str(err.value)
    assert len(stub.requests) == 1, "the refused request must not go upstream"
    client(second, "other").chat.completions.create(model="m", messages=MSGS)  # others are free
    first.stop()  # releases r1: the second proxy takes over where the log left off
    client(second).chat.completions.create(model="m", messages=MSGS)
    assert [r["index"] for r, o in exchanges(tmp_path / "records", "r1") if o] == [0, 1]


def test_log_closed_for_fd_budget_and_changed_meanwhile_is_refused(tmp_path):
    rec = Recorder(tmp_path, max_open_files=1)
    rec.append("a", {"type": "request", "index": rec.next_index("a")})
    rec.append("b", {"type": "request", "index": rec.next_index("b")})  # closes a's log
    other = Recorder(tmp_path)
    other.append("a", {"type": "request", "index": other.next_index("a")})  # a was unlocked
    other.close()
    with pytest.raises(RecordError, match="changed while this proxy had it closed"):
        rec.append("a", {"type": "request", "index": rec.next_index("a")})
    rec.append("c", {"type": "request", "index": rec.next_index("c")})  # closes b's log
    rec.append("b", {"type": "request", "index": rec.next_index("b")})  # unchanged: reopened
    with pytest.raises(RecordError, match="another process"):
        Recorder(tmp_path).next_index("b")  # and locked again
    rec.close()
    assert [orjson.loads(x)["index"] for x in (tmp_path / "b" / "exchanges.jsonl").read_bytes().splitlines()] == [0, 1]  # fmt: skip


def test_torn_last_line_is_fenced_off(stub_factory, proxy_factory, tmp_path, caplog):
    log = tmp_path / "records" / "r1" / "exchanges.jsonl"
    log.parent.mkdir(parents=True)
    stub = stub_factory([Reply(), Reply()])
    proxy = proxy_factory(stub.url)
    client(proxy).chat.completions.create(model="m", messages=MSGS)
    proxy.stop()
    intact = log.read_bytes()
    log.write_bytes(intact + b'{"schema_version":1,"index":1,"rollout_id":"r1","type":"requ')
    with caplog.at_level("WARNING"):
        proxy = proxy_factory(stub.url)
        client(proxy).chat.completions.create(model="m", messages=MSGS)
        proxy.stop()
    assert "torn" in caplog.text
    lines = log.read_bytes().split(b"\n")
    assert lines[2].endswith(b'"type":"requ') and lines[-1] == b""
    new = [orjson.loads(x) for x in lines[3:-1]]
    assert [(r["type"], r["index"]) for r in new] == [("request", 1), ("outcome", 1)]


def test_stop_finishes_in_flight_records(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="a" * 40, chunks=40, chunk_delay=0.05), Reply(delay=0.3)])
    proxy = proxy_factory(stub.url, stop_grace=0.2)
    errors: list[BaseException] = []

    def slow_stream() -> None:
        try:
            list(client(proxy).chat.completions.create(model="m", messages=MSGS, stream=True))
        except openai.APIError as exc:
            errors.append(exc)

    t = threading.Thread(target=slow_stream)
    t.start()
    wait_for(lambda: len(stub.requests) == 1)
    proxy.stop()
    t.join(10)
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "upstream_error" and "proxy stopped" in out["error"]
    assert out["stream_events"], "what arrived is kept"
    assert errors, "the client must see the cut, never a clean end"
    wait_for(lambda: stub.cancelled == [0])


def _start_cli(
    stub_url: str, record_dir: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [*CLI, "proxy", "--upstream", stub_url, "--record-dir", str(record_dir), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    line = proc.stdout.readline() if proc.stdout else ""
    assert line.startswith("contagent proxy listening on http://127.0.0.1:"), line + (
        proc.stderr.read() if proc.stderr else ""
    )
    return proc, line.split()[4]


def _posts(stub):
    """The requests the stub got but the proxy's start-up look at what it is (its GETs)."""
    return [r for r in stub.requests if r.method == "POST"]


def _post_in_thread(url: str, **kw) -> threading.Thread:
    def go() -> None:
        try:
            openai.OpenAI(
                base_url=url, api_key="k", max_retries=0, timeout=20
            ).chat.completions.create(model="m", messages=MSGS, **kw)
        except openai.APIError:
            pass

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_sigkilled_proxy_leaves_request_without_outcome(stub_factory, tmp_path, proxy_factory):
    stub = stub_factory([Reply(delay=3.0), Reply(content="after restart")])
    proc, url = _start_cli(stub.url, tmp_path / "records")
    try:
        log = tmp_path / "records" / "r1" / "exchanges.jsonl"
        t = _post_in_thread(f"{url}/r/r1/v1")
        wait_for(lambda: log.exists() and log.read_bytes().endswith(b"\n"))
        wait_for(lambda: len(_posts(stub)) == 1)  # in flight upstream
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    t.join(10)
    [(req, out)] = exchanges(tmp_path / "records", "r1")
    assert req["index"] == 0 and out is None
    proxy = proxy_factory(stub.url)
    resp = client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert resp.choices[0].message.content == "after restart"
    pairs = exchanges(tmp_path / "records", "r1")
    assert [(r["index"], o and o["outcome"]) for r, o in pairs] == [(0, None), (1, "completed")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_signal_finishes_in_flight_then_exits(stub_factory, tmp_path, sig):
    stub = stub_factory([Reply(delay=1.0, content="late but whole")])
    proc, url = _start_cli(stub.url, tmp_path / "records", "--upstream-api-key-env", "UPKEY",
                           env={"UPKEY": "sk-from-env"})  # fmt: skip
    try:
        t = _post_in_thread(f"{url}/r/r1/v1")
        wait_for(lambda: len(_posts(stub)) == 1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    t.join(10)
    assert proc.returncode == 0, err
    assert "1 exchanges recorded (completed 1)" in err
    [(_, out)] = exchanges(tmp_path / "records", "r1")
    assert out["outcome"] == "completed"
    assert _posts(stub)[0].headers["Authorization"] == "Bearer sk-from-env"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--upstream", "http://127.0.0.1:9", "--upstream-api-key-env", "NOPE_UNSET"],
            {},
            "NOPE_UNSET is not set",
        ),
        (["--upstream", "ftp://example.invalid"], {}, "is not an http(s) URL"),
        (
            ["--upstream", "http://127.0.0.1:9", "--upstream-auth-header", "Content-Length"],
            {},
            "not a header that can carry a key",
        ),
        (["--upstream", "http://127.0.0.1:9", "--upstream-timeout", "0"], {}, "must be positive"),
        (
            ["--upstream", "https://127.0.0.1:9", "--upstream-ca", "{tmp}/missing.pem"],
            {},
            "missing.pem: No such file",
        ),
        (
            ["--upstream", "https://127.0.0.1:9", "--upstream-ca", "{tmp}/not-pem.txt"],
            {},
            "not a PEM CA certificate",
        ),
        (
            ["--upstream", "http://127.0.0.1:9", "--upstream-ca", "{tmp}/not-pem.txt"],
            {},
            "only applies to an https:// upstream",
        ),
        (
            ["--upstream", "http://127.0.0.1:9", "--host", "127.0.0.1", "--port", "{busy}"],
            {},
            "cannot listen",
        ),
        (["--upstream", "http://127.0.0.1:9", "--max-clients", "0"], {}, "--max-clients must be"),
        (["--upstream", "http://127.0.0.1:9", "--head-timeout", "-1"], {}, "--head-timeout must"),
        (
            ["--upstream", "http://127.0.0.1:9"],
            {"HTTP_PROXY": "https://proxy.invalid:3128"},
            "only http:// outbound proxies are supported",
        ),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path, args, env, message):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        (tmp_path / "not-pem.txt").write_text("hello\n")
        args = [
            a.replace("{busy}", str(busy.getsockname()[1])).replace("{tmp}", str(tmp_path))
            for a in args
        ]
        r = subprocess.run([*CLI, "proxy", "--record-dir", str(tmp_path / "rec"), *args],
                           capture_output=True, text=True, timeout=30, env={**os.environ, **env})  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.startswith("contagent: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


def test_record_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    r = subprocess.run([*CLI, "proxy", "--upstream", "http://127.0.0.1:9", "--record-dir", str(tmp_path / "f")],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert r.returncode == 2 and "not a directory" in r.stderr and r.stderr.count("\n") == 1


def test_unwritable_log_refuses_the_request_without_forwarding(
    stub_factory, proxy_factory, tmp_path
):
    if os.geteuid() == 0:
        # root ignores file modes: make the log path a directory instead, which nobody can append to
        blocker = tmp_path / "records" / "r1" / "exchanges.jsonl"
        blocker.mkdir(parents=True)
    else:
        (tmp_path / "records" / "r1").mkdir(parents=True)
        (tmp_path / "records" / "r1").chmod(0o500)
    stub = stub_factory([Reply()])
    proxy = proxy_factory(stub.url)
    with pytest.raises(openai.InternalServerError) as err:
        client(proxy).chat.completions.create(model="m", messages=MSGS)
    assert err.value.status_code == 500 and "could not record" in str(err.value)
    assert stub.requests == [], "nothing may go upstream unrecorded"


def test_a_write_cut_short_is_fenced_off_so_the_next_record_survives(tmp_path, monkeypatch):
    """A full disk can take half a line: the next record must not be glued onto it."""
    import errno

    from contagent.proxy import recorder as recorder_module

    real_write = os.write
    full = {"on": False, "wrote": False}

    def write(fd, data):  # as write(2) on a disk that fills: a short count, then ENOSPC
        if full["on"]:
            if full["wrote"]:
                full["on"] = full["wrote"] = False
                raise OSError(errno.ENOSPC, "No space left on device")
            full["wrote"] = True
            return real_write(fd, bytes(data[: len(data) // 2]))
        return real_write(fd, data)

    monkeypatch.setattr(recorder_module.os, "write", write)
    rec = Recorder(tmp_path)
    rec.append("a", {"type": "request", "index": rec.next_index("a")})
    full["on"] = True
    with pytest.raises(RecordError, match="No space left"):
        rec.append("a", {"type": "request", "index": 1, "pad": "x" * 100})
    rec.append("a", {"type": "request", "index": 1})
    rec.append("a", {"type": "outcome", "index": 1})
    rec.close()
    lines = (tmp_path / "a" / "exchanges.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert orjson.loads(lines[-3]) == {"type": "request", "index": 1}
    assert orjson.loads(lines[-2]) == {"type": "outcome", "index": 1}
    assert lines[1].startswith(b'{"type":"request","index":1,"pad"')  # the cut line, alone


def test_file_system_without_locks_still_records(tmp_path, monkeypatch, caplog):
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    rec = Recorder(tmp_path)
    rec.append("a", {"type": "request", "index": rec.next_index("a")})
    rec.close()
    assert (tmp_path / "a" / "exchanges.jsonl").read_bytes().count(b"\n") == 1
    assert "cannot lock (No locks available); recording without the lock" in caplog.text


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(
        st.one_of(
            st.tuples(st.just("request"), st.integers(0, 50)),
            st.tuples(st.just("outcome"), st.integers(0, 50)),
            st.binary(max_size=40).filter(lambda b: b"\n" not in b),
        ),
        max_size=30,
    ),
    torn=st.booleans(),
)
def test_scan_log_finds_the_next_index_of_any_log(lines, torn):
    """Restart never reuses an index, whatever the log holds; a torn tail is seen as torn."""
    data = b""
    requests: list[int] = []
    for item in lines:
        if isinstance(item, tuple):
            kind, idx = item
            data += orjson.dumps({"type": kind, "index": idx, "note": '"request"'}) + b"\n"
            if kind == "request":
                requests.append(idx)
        else:
            data += item + b"\n"  # garbage, a blank line, even a JSON request without index
            try:
                rec = orjson.loads(item)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.get("type") == "request":
                idx = rec.get("index")
                requests.append(idx if isinstance(idx, int) else -1)
    if torn:
        data += b'{"type":"request","index":9'
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "exchanges.jsonl"
        path.write_bytes(data)
        next_index, seen_torn = scan_log(path)
    assert seen_torn == (torn or (bool(data) and not data.endswith(b"\n")))
    assert next_index >= len(requests)
    assert all(next_index > i for i in requests)
    assert next_index == max([len(requests), *(i + 1 for i in requests)])
