"""Proxy features are addons: the core runs every addon's hooks and knows none by name.

A feature added in a test (one object in the proxy's addon list) changes what goes
upstream, lists its change in the request record, sees every stream event and the JSON
body, and changes what the client gets, with no line of the core written for it.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from contagent.proxy import ProxyOptions
from contagent.proxy.addons import TABLE, AddonBase, Flow, Hooks, make_addons
from contagent.proxy.policy_gate import PolicyGate
from contagent.proxy.sse import SSEParser
from contagent.testing.llm_stub import Reply
from tests.proxy.helpers import exchanges
from tests.test_package import import_graph

#: the server core: forwarding, relaying and recording
CORE = ("server", "exchange", "stream_state", "downstream", "upstream")
MSGS = [{"role": "user", "content": "hi"}]


class _Upper:
    """A test watch: sees each object, upper-cases each text the client gets."""

    def __init__(self) -> None:
        self.objects: list[Any] = []

    def seen(self, obj: Any) -> None:
        self.objects.append(obj)

    def hide(self, obj: Any) -> bool:
        changed = False
        for choice in obj.get("choices") or () if isinstance(obj, dict) else ():
            for part in ("message", "delta"):
                box = choice.get(part)
                if isinstance(box, dict) and isinstance(box.get("content"), str):
                    box["content"] = box["content"].upper()
                    changed = True
        return changed

    def fields(self) -> dict[str, Any]:
        return {}


class _Shout(AddonBase):
    """A test feature: asks upstream for a ``shout`` and watches the answer."""

    def __init__(self) -> None:
        self.watches: list[_Upper] = []

    def request(self, flow: Flow) -> None:
        flow.body = {**flow.body, "shout": True}
        flow.changes.append("shout")
        flow.watch = _Upper()
        self.watches.append(flow.watch)


@pytest.mark.parametrize("stream", [False, True])
def test_an_addon_changes_the_request_and_watches_the_response(
    stub_factory, proxy_factory, tmp_path, stream
):
    stub = stub_factory([Reply(content="quiet words")])
    running = proxy_factory(stub.url)
    shout = _Shout()
    running.proxy.set_addons([*running.proxy.addons, shout])
    url = running.rollout_base_url("r1") + "/chat/completions"
    resp = httpx.post(url, json={"model": "m", "messages": MSGS, "stream": stream}, timeout=20)
    assert resp.status_code == 200
    sent = orjson.loads(stub.requests[0].body)
    assert sent["shout"] is True
    request, outcome = exchanges(tmp_path / "records", "r1")[0]
    assert request["upstream_changes"][-1] == "shout"
    assert "shout" not in request["body"]  # the recorded body is the client's
    [watch] = shout.watches
    if stream:
        payloads = [p for p in SSEParser().feed(resp.content) if p.startswith("{")]
        texts = [
            c["delta"].get("content") or ""
            for p in payloads
            for c in orjson.loads(p)["choices"]  # the usage chunk has none
        ]
        assert "".join(texts) == "QUIET WORDS"
        assert len(watch.objects) == len(payloads)  # every event, each once
    else:
        assert resp.json()["choices"][0]["message"]["content"] == "QUIET WORDS"
        assert len(watch.objects) == 1
    assert outcome is not None
    assert outcome["response"]["choices"][0]["message"]["content"] == "quiet words"


def test_no_addon_no_change(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="x")])
    running = proxy_factory(stub.url)
    running.proxy.set_addons([])
    url = running.rollout_base_url("r1") + "/chat/completions"
    body = {"model": "m", "messages": MSGS, "stream": True}
    httpx.post(url, json=body, timeout=20)
    request, _ = exchanges(tmp_path / "records", "r1")[0]
    assert request["upstream_changes"] == [] and request["sampling"] is None
    assert orjson.loads(stub.requests[0].body) == body  # not even usage is asked for


def test_the_table_makes_the_features_the_options_turn_on():
    made = make_addons(ProxyOptions(chat_template="{{ x }}", policy=PolicyGate()))
    assert len(made) == len(TABLE)
    assert len(make_addons(ProxyOptions())) == len(TABLE) - 2  # no template, no engine


def test_the_core_imports_no_feature():
    graph = import_graph()
    features = {m for m in graph if m.startswith("contagent.proxy.addons.")}
    features |= {"contagent.proxy.tokens", "contagent.proxy.policy_gate"}
    assert len(features) == len(TABLE) + 2
    for name in CORE:
        imported = set(graph[f"contagent.proxy.{name}"])
        assert not imported & features, name


def test_only_the_hooks_an_addon_defines_are_called():
    class Stamp(AddonBase):
        def stamp(self, record: dict[str, Any]) -> None:
            record["x"] = 1

    stamp, plain = Stamp(), AddonBase()
    hooks = Hooks([plain, stamp])
    assert hooks.stamp == [stamp]
    assert hooks.admit == hooks.request == hooks.left == hooks.outcome == hooks.planned == []
