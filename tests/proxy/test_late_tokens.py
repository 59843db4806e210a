"""``--tokens auto`` on the proxy alone decides at the first contact that succeeds, and
``--chat-template`` goes up with every chat request."""

from __future__ import annotations

import socket
import subprocess
import sys

import openai
import orjson

from contagent.testing.llm_stub import Reply, start_stub_in_thread
from tests.proxy.helpers import client, exchanges


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_auto_decides_at_the_first_contact(tmp_path):
    port = _free_port()
    records = tmp_path / "records"
    proc = subprocess.Popen(
        [sys.executable, "-m", "contagent", "proxy", "--upstream", f"http://127.0.0.1:{port}",
         "--record-dir", str(records)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stub = None
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = proc.stdout.readline().split()[4]
        first = proc.stderr.readline().strip()
        assert first.startswith("tokens: not recorded (the upstream is not vLLM: no answer")
        assert first.endswith(") until the first contact")
        c = openai.OpenAI(base_url=f"{url}/r/r1/v1", api_key="x", max_retries=0, timeout=30)
        try:  # still down: goes up as it came, and fails
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        except openai.APIStatusError as exc:
            assert exc.status_code == 502
        stub = start_stub_in_thread([Reply(content="ok")], port=port)
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
        said = proc.stderr.readline().strip()
        assert said == (
            "tokens: recorded on chat, messages (via chat), responses (via chat) "
            "(the upstream is vLLM 0.32.0), at the first contact"
        )
        assert proc.stderr.readline().startswith("logprobs: raw_logprobs (probed: ")
        (down, _), (up, out) = exchanges(records, "r1")
        assert down["upstream_changes"] == [] and down["server"] is None
        assert up["upstream_changes"] == ["return_token_ids", "logprobs", "top_logprobs"]
        assert up["server"]["logprobs_mode"] == "raw_logprobs"
        assert out is not None and out["tokens"] is not None
    finally:
        proc.terminate()
        proc.wait(30)
        if stub is not None:
            stub.stop()


def test_the_chat_template_goes_up_with_chat_requests(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="a"), Reply(content="b"), Reply(content="c")])
    proxy = proxy_factory(stub.url, chat_template="{{ messages }}")
    c = client(proxy)
    msgs = [{"role": "user", "content": "hi"}]
    c.chat.completions.create(model="m", messages=msgs)
    c.chat.completions.create(model="m", messages=msgs, extra_body={"chat_template": "own"})
    c.completions.create(model="m", prompt="x")
    sent = [orjson.loads(r.body) for r in stub.requests]
    assert sent[0]["chat_template"] == "{{ messages }}"
    assert sent[1]["chat_template"] == "own"  # the client's own is kept
    assert "chat_template" not in sent[2]  # not a chat request
    (a, _), (b, _), (d, _) = exchanges(tmp_path / "records", "r1")
    assert a["upstream_changes"] == ["chat_template"] and "chat_template" not in a["body"]
    assert b["upstream_changes"] == [] and d["upstream_changes"] == []
