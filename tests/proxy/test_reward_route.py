"""The reward control route (its own port, bytes on the wire) and ``contagent reward``."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contagent.errors import ContagentError
from contagent.proxy.reward_route import MAX_REWARD_BODY, RewardRoute
from contagent.rawlog.reward import (
    REWARD_SCHEMA_VERSION,
    RewardPost,
    parse_post,
    read_reward,
    write_reward,
)
from contagent.testing.llm_stub import Reply
from tests.proxy.helpers import read_all


@pytest.fixture
def route(tmp_path: Path):
    (tmp_path / "r1").mkdir()
    loop = asyncio.new_event_loop()
    served = RewardRoute(tmp_path)
    loop.run_until_complete(served.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield served
    asyncio.run_coroutine_threadsafe(served.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _send(route: RewardRoute, payload: bytes) -> tuple[bytes, bytes]:
    with socket.create_connection(("127.0.0.1", route.port), timeout=10) as sock:
        sock.sendall(payload)
        raw = read_all(sock, b"\r\n\r\n")
        head, _, body = raw.partition(b"\r\n\r\n")
        length = int(next(
            line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        ))  # fmt: skip
        while len(body) < length:
            body += sock.recv(65536)
    return head.split(b"\r\n")[0], body


def _post(body: bytes, path: str = "/reward", method: str = "POST") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def test_a_reward_is_recorded_in_the_rollouts_folder(route, tmp_path):
    line, body = _send(route, _post(b'{"rollout_id":"r1","reward":0.5,"passed":true,"group":"t"}'))
    assert line == b"HTTP/1.1 200 OK"
    want = {"rollout_id": "r1", "reward": 0.5, "passed": True, "group": "t",
            "schema_version": REWARD_SCHEMA_VERSION}  # fmt: skip
    assert orjson.loads(body) == want
    assert orjson.loads((tmp_path / "r1" / "reward.json").read_bytes()) == want
    line, _ = _send(route, _post(b'{"rollout_id":"r1","reward":1}'))  # a later one replaces it
    assert line == b"HTTP/1.1 200 OK"
    got = read_reward(tmp_path / "r1")
    assert got is not None and got.reward == 1.0 and got.passed is None and got.group is None
    assert [p.name for p in (tmp_path / "r1").iterdir()] == ["reward.json"]  # no temp file left


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        (_post(b"not json"), b"400 Bad Request", "the body is not JSON"),
        (_post(b"[1]"), b"400 Bad Request", "the body must be a JSON object"),
        (_post(b'{"reward":1}'), b"400 Bad Request", "rollout_id: missing"),
        (_post(b'{"rollout_id":"r1"}'), b"400 Bad Request", "reward: missing"),
        (_post(b'{"rollout_id":"r1","reward":"1"}'), b"400 Bad Request", "reward: must be a number"),
        (_post(b'{"rollout_id":"r1","reward":true}'), b"400 Bad Request", "reward: must be a number"),
        (_post(b'{"rollout_id":"r1","reward":1e999}'), b"400 Bad Request", "the body is not JSON"),
        (_post(b'{"rollout_id":"r1","reward":1,"passed":1}'), b"400 Bad Request", "passed: Input should be a valid boolean"),
        (_post(b'{"rollout_id":"r1","reward":1,"group":""}'), b"400 Bad Request", "group: String should have at least 1 character"),
        (_post(b'{"rollout_id":"r1","reward":1,"x":1}'), b"400 Bad Request", "x: not a field (rollout_id, reward, passed, group)"),
        (_post(b'{"rollout_id":"../r1","reward":1}'), b"400 Bad Request", "rollout_id: rollout id '../r1' is not a safe single path segment"),
        (_post(b'{"rollout_id":"r2","reward":1}'), b"404 Not Found", "no rollout 'r2' in "),
        (_post(b"{}", path="/r/r1/v1/reward"), b"404 Not Found", "no such route: the reward route is POST /reward"),
        (_post(b"", method="GET"), b"405 Method Not Allowed", "use POST /reward"),
        (_post(b"{" + b" " * MAX_REWARD_BODY + b"}"), b"413 Request Entity Too Large", f"the body is larger than {MAX_REWARD_BODY} bytes"),
    ],
)  # fmt: skip
def test_a_bad_body_gets_a_4xx_with_one_line(route, tmp_path, payload, status, message):
    line, body = _send(route, payload)
    assert line == b"HTTP/1.1 " + status
    got = orjson.loads(body)["error"]["message"]
    assert got.startswith(message) and "\n" not in got
    assert not (tmp_path / "r1" / "reward.json").exists()


@given(st.dictionaries(st.sampled_from(["rollout_id", "reward", "passed", "group", "x"]),
                       st.one_of(st.none(), st.booleans(), st.floats(), st.text(max_size=5),
                                 st.integers())))  # fmt: skip
def test_parse_post_raises_only_one_line_errors(data):
    try:
        post = parse_post(data)
    except ContagentError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(post.reward, float) and post.reward == post.reward


def test_read_reward_goes_through_the_version_gate(tmp_path):
    folder = tmp_path / "r1"
    folder.mkdir()
    assert read_reward(folder) is None
    write_reward(folder, RewardPost(rollout_id="r1", reward=0.25))
    assert read_reward(folder).reward == 0.25
    data = orjson.loads((folder / "reward.json").read_bytes())
    (folder / "reward.json").write_bytes(orjson.dumps({**data, "schema_version": 99}))
    with pytest.raises(ContagentError, match="newer than this contagent reads"):
        read_reward(folder)
    (folder / "reward.json").write_bytes(orjson.dumps({**data, "rollout_id": "r9"}))
    with pytest.raises(ContagentError, match="is not its folder's 'r1'"):
        read_reward(folder)
    (folder / "reward.json").write_bytes(b"{")
    with pytest.raises(ContagentError, match="malformed JSON"):
        read_reward(folder)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "contagent", *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_reward_command_writes_it_offline(tmp_path):
    folder = tmp_path / "r1"
    folder.mkdir()
    done = _cli("reward", str(folder), "--reward", "0.5", "--failed", "--group", "g")
    assert done.returncode == 0, done.stderr
    got = read_reward(folder)
    assert got is not None and (got.reward, got.passed, got.group) == (0.5, False, "g")
    (folder / "result.json").write_text("{}")
    refused = _cli("reward", str(folder), "--reward", "1")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "its reward is the run's" in refused.stderr
    missing = _cli("reward", str(tmp_path / "nope"), "--reward", "1")
    assert missing.returncode == 2 and "not a rollout folder" in missing.stderr
    bad = _cli("reward", str(folder.parent / "r1"), "--reward", "inf")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_the_proxy_command_serves_the_route_apart_from_the_agents(stub_factory, tmp_path):
    stub = stub_factory([Reply(content="ok")])
    records = tmp_path / "records"
    proc = subprocess.Popen(
        [sys.executable, "-m", "contagent", "proxy", "--upstream", stub.url, "--record-dir",
         str(records), "--reward-port", "0", "--tokens", "off"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[4]
        reward_url = proc.stdout.readline().strip().removeprefix("reward route on ")
        assert reward_url.startswith("http://127.0.0.1:") and reward_url.endswith("/reward")
        assert reward_url.rsplit(":", 1)[1] != url.rsplit(":", 1)[1]
        import openai

        c = openai.OpenAI(base_url=f"{url}/r/r1/v1", api_key="x", max_retries=0)
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        from tests.proxy.helpers import http

        # the agents' side forwards everything upstream: no reward route there
        agent_side = http("POST", f"{url}/reward", json={"rollout_id": "r1", "reward": 1})
        assert agent_side.status_code == 404
        posted = http("POST", reward_url, json={"rollout_id": "r1", "reward": 1, "passed": True})
        assert posted.status_code == 200
        got = read_reward(records / "r1")
        assert got is not None and got.passed is True
    finally:
        proc.terminate()
        proc.wait(30)
