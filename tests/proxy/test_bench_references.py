"""The benchmark's reference pass-throughs do what the README's bound claims they do.

The bound on JSON throughput (``passthrough_llhttp.py --record-requests``) only means
something if that reference really records every request body, verbatim, before the
request goes upstream, and forwards the answer untouched.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import openai
import orjson
import pytest

from contagent.testing.llm_stub import Reply, start_stub_in_thread

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "passthrough_llhttp.py"


def _start(upstream: str, log: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), upstream, str(log), *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        pytest.fail(f"reference did not start: {line!r}")
    return proc, line.split("listening on ", 1)[1].strip()


@pytest.mark.parametrize("record", [False, True])
def test_reference_forwards_and_records_as_documented(tmp_path: Path, record: bool) -> None:
    stub = start_stub_in_thread([Reply(content="ok"), Reply(content="a streamed ok", chunks=4)])
    log = tmp_path / "ref.jsonl"
    proc, url = _start(stub.url, log, *(["--record-requests"] if record else []))
    try:
        c = openai.OpenAI(base_url=f"{url}/r/bench/v1", api_key="k", max_retries=0, timeout=20)
        messages = [{"role": "user", "content": 'héllo "quoted" ' + "x" * 40_000}]
        answer = c.chat.completions.create(model="m", messages=messages)
        chunks = list(c.chat.completions.create(model="m", messages=messages, stream=True))
    finally:
        proc.terminate()
        proc.wait(10)
        stub.stop()
    assert answer.choices[0].message.content == "ok"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "a streamed ok"  # relayed whole
    raw_lines = log.read_bytes().splitlines()
    lines = [orjson.loads(x) for x in raw_lines]
    assert [x["status"] for x in lines if "status" in x] == [200, 200]  # one per exchange
    if not record:
        assert len(lines) == 2
        return
    # each request's line is written before it is forwarded, so before its end line
    assert ["body" in x for x in lines] == [True, False, True, False]
    requests = [(raw, x) for raw, x in zip(raw_lines, lines, strict=True) if "body" in x]
    assert [x["stream"] for _, x in requests] == [False, True]
    assert len(stub.requests) == 2
    for (raw, line), seen in zip(requests, stub.requests, strict=True):
        assert line["body"]["messages"] == messages
        assert seen.body in raw  # the upstream's bytes, verbatim in the line
