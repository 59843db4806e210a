"""Policy versions and pauses at the recording proxy: the records carry the version each
exchange went up and ended under, a pause holds new requests and never cuts one in flight."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest
import requests

from contagent.export.exporter import ExportOptions, export
from contagent.proxy import start_proxy_in_thread
from contagent.proxy.policy_gate import PolicyGate
from contagent.rawlog.read import read_exchanges
from contagent.rawlog.records import BASE_VERSION, POLICY_VERSION
from contagent.rawlog.result import RolloutResult
from contagent.rules.policy_versions import step_version, token_versions
from contagent.testing.llm_stub import Reply, start_stub_in_thread
from tests.helpers import read_rows

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 1.0}


def _post(url: str, out: list[Any]) -> threading.Thread:
    def go() -> None:
        out.append(requests.post(f"{url}/chat/completions", json=BODY, timeout=30).status_code)

    thread = threading.Thread(target=go)
    thread.start()
    return thread


def _wait(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _exchanges(record_dir: Path, rollout: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    raw = read_exchanges(record_dir / rollout / "exchanges.jsonl")
    return [(raw.requests[i], raw.outcomes[i]) for i in sorted(raw.requests)]


def test_a_pause_swaps_versions_with_no_request_upstream(tmp_path: Path) -> None:
    stub = start_stub_in_thread(lambda req: Reply(content="ok", delay=0.5), models=["m"])
    gate = PolicyGate()
    done: list[Any] = []
    try:
        with start_proxy_in_thread(stub.url, tmp_path, policy=gate) as proxy:
            url = proxy.rollout_base_url("r")
            first = _post(url, done)
            _wait(lambda: len(stub.requests) == 1)  # upstream, answering in 0.5 s
            gate.pause()
            second = _post(url, done)
            _wait(lambda: gate.held == 1)
            assert gate.wait_idle(10)  # returned once the first ended, not by cutting it
            first.join(10)
            assert done == [200] and len(stub.requests) == 1
            swapped = time.time()
            gate.set_version(1)
            time.sleep(0.2)
            assert len(stub.requests) == 1  # still held
            gate.resume()
            second.join(10)
    finally:
        stub.stop()
    assert done == [200, 200] and gate.inflight == 0
    (a_req, a_out), (b_req, b_out) = _exchanges(tmp_path, "r")
    assert (a_req["policy_version"], a_out["policy_version"]) == (0, 0)
    assert (b_req["policy_version"], b_out["policy_version"]) == (1, 1)
    assert a_out["ended"] < swapped < b_out["started"]  # nothing upstream across the swap
    assert a_out["outcome"] == b_out["outcome"] == "completed"
    assert a_req["schema_version"] == POLICY_VERSION


def test_a_step_spanning_an_update_carries_both_and_gives_no_samples(
    tmp_path: Path,
) -> None:
    stub = start_stub_in_thread(lambda req: Reply(content="ok", delay=0.5), models=["m"])
    gate = PolicyGate(4)
    done: list[Any] = []
    try:
        with start_proxy_in_thread(stub.url, tmp_path / "rec", policy=gate, tokens=True) as px:
            thread = _post(px.rollout_base_url("r"), done)
            _wait(lambda: len(stub.requests) == 1)
            gate.set_version(5)  # no pause: the step is in flight across the update
            thread.join(10)
    finally:
        stub.stop()
    ((req, out),) = _exchanges(tmp_path / "rec", "r")
    assert (req["policy_version"], out["policy_version"]) == (4, 5)
    verdict = RolloutResult(rollout_id="r", status="passed", passed=True, reward=1.0)
    (tmp_path / "rec" / "r" / "result.json").write_text(verdict.model_dump_json())
    export(
        [tmp_path / "rec"],
        tmp_path / "out",
        ExportOptions(formats=("tokens",), filter="all", allow_raw_logprobs=True),
    )
    assert pq.read_table(tmp_path / "out" / "tokens" / "data").num_rows == 0
    (row,) = read_rows(tmp_path / "out" / "results.jsonl")
    assert row["tokens"]["kinds"] == ["bad_tokens"]  # which weights sampled it is unknown
    assert row["tokens"]["reason"].startswith("step 0: ran across a policy update (4 -> 5)")


def test_a_held_request_whose_client_left_is_not_counted(tmp_path: Path) -> None:
    stub = start_stub_in_thread(lambda req: Reply(content="ok"), models=["m"])
    gate = PolicyGate()
    try:
        with start_proxy_in_thread(stub.url, tmp_path, policy=gate) as proxy:
            gate.pause()
            body = orjson.dumps(BODY)
            host, port = proxy.url.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=10) as client:
                client.sendall(
                    b"POST /r/r/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
                _wait(lambda: gate.held == 1)
            _wait(lambda: not proxy.proxy._conns)  # the proxy saw the client go
            gate.resume()
            _wait(lambda: gate.inflight == 0 and gate.held == 0)
            assert stub.requests == []  # it never went up
    finally:
        stub.stop()
    assert not (tmp_path / "r" / "exchanges.jsonl").exists()  # nothing to record


def test_a_proxy_without_a_gate_records_no_versions(tmp_path: Path) -> None:
    stub = start_stub_in_thread(lambda req: Reply(content="ok"), models=["m"])
    try:
        with start_proxy_in_thread(stub.url, tmp_path) as proxy:
            requests.post(f"{proxy.rollout_base_url('r')}/chat/completions", json=BODY, timeout=10)
    finally:
        stub.stop()
    for line in (tmp_path / "r" / "exchanges.jsonl").read_bytes().splitlines():
        record = orjson.loads(line)
        assert "policy_version" not in record and record["schema_version"] == BASE_VERSION


def test_versions_only_go_forward() -> None:
    gate = PolicyGate(2)
    with pytest.raises(ValueError, match="older"):
        gate.set_version(1)
    with pytest.raises(TypeError):
        gate.set_version(True)
    gate.set_version(2)
    assert gate.version == 2


@pytest.mark.parametrize(
    ("start", "end", "problem"),
    [
        (1, None, "only one of its records"),
        (None, 1, "only one of its records"),
        (True, 1, "is not a version"),
        (-1, 0, "is not a version"),
        ("1", 1, "is not a version"),
        (3, 2, "went back"),
        (2, 3, "ran across a policy update (2 -> 3)"),
    ],
)
def test_untrustworthy_step_versions_give_no_samples(start: Any, end: Any, problem: str) -> None:
    found = step_version({"policy_version": start}, {"policy_version": end}, "step 0")
    assert isinstance(found, tuple) and found[0] == "bad_tokens" and problem in found[1]


def test_step_versions_are_read_and_laid_per_token() -> None:
    assert step_version({}, {}, "s") is None
    assert step_version({"policy_version": 2}, {"policy_version": 2}, "s") == 2
    assert token_versions([(0, 3, 1), (3, 5, 2)], 5) == [1, 1, 1, 2, 2]
    assert token_versions([(0, 2, None), (2, 3, 1)], 3) is None
