"""The proxy's few requests before it serves: JSON in and out, untrusted answers cut at
their limit, no redirect followed, one deadline for all of them."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import orjson
import pytest

from contagent.proxy.upstream_ask import ASK_ERRORS, UpstreamAsk


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/big":
            self._answer(200, b'"' + b"x" * 100 + b'"')
        elif self.path == "/text":
            self._answer(200, b"not json")
        elif self.path == "/moved":
            self._answer(302, b"", Location="/v1/models")
        elif self.path == "/slow":
            time.sleep(1.0)
            self._answer(200, b"{}")
        else:
            self._answer(200, orjson.dumps({"path": self.path, "auth": self.headers["X-Key"]}))

    def do_POST(self) -> None:
        sent = self.rfile.read(int(self.headers["Content-Length"]))
        kind = self.headers["Content-Type"]
        self._answer(201, orjson.dumps({"got": orjson.loads(sent), "type": kind}))


@pytest.fixture
def upstream() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_get_and_post_exchange_json(upstream: str) -> None:
    ask = UpstreamAsk(10.0, None)
    status, answer = ask.get(upstream + "/v1/models?x=1", {"X-Key": "k"}, 1024)
    assert (status, answer) == (200, {"path": "/v1/models?x=1", "auth": "k"})
    status, answer = ask.post(upstream + "/render", {"model": "m"}, {}, 1024)
    assert (status, answer) == (201, {"got": {"model": "m"}, "type": "application/json"})


def test_an_answer_over_the_limit_or_not_json_is_none(upstream: str) -> None:
    ask = UpstreamAsk(10.0, None)
    assert ask.get(upstream + "/big", {}, 102) == (200, "x" * 100)
    assert ask.get(upstream + "/big", {}, 101) == (200, None)
    assert ask.get(upstream + "/text", {}, 1024) == (200, None)


def test_a_redirect_is_not_followed(upstream: str) -> None:
    assert UpstreamAsk(10.0, None).get(upstream + "/moved", {}, 1024) == (302, None)


def test_one_deadline_for_every_request(upstream: str) -> None:
    ask = UpstreamAsk(0.3, None)
    with pytest.raises(ASK_ERRORS):
        ask.get(upstream + "/slow", {}, 1024)
    with pytest.raises(TimeoutError):  # the deadline has passed: nothing more is sent
        ask.get(upstream + "/v1/models", {"X-Key": "k"}, 1024)


def test_a_refused_connection_or_a_bad_url_raises_a_listed_error() -> None:
    with pytest.raises(ASK_ERRORS):
        UpstreamAsk(5.0, None).get("http://127.0.0.1:1/v1/models", {}, 1024)
    with pytest.raises(ASK_ERRORS):
        UpstreamAsk(5.0, None).get("ftp://example/v1/models", {}, 1024)
