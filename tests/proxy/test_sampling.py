"""--sampling-override / --sampling-defaults: parsed once, applied to requests, and each
request's effective sampling recorded with where each value came from."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contagent.errors import ContagentError
from contagent.proxy.addons import request_flow
from contagent.proxy.addons.sampling_addon import SamplingAddon
from contagent.proxy.sampling_options import (
    SETTABLE,
    SamplingPolicy,
    parse_sampling,
    server_defaults,
)
from contagent.rawlog.records import SAMPLING_KEYS, RequestRecord
from contagent.testing.llm_stub import Reply
from contagent.testing.stub_server_info import VLLM_DEFAULTS
from tests.proxy.helpers import client, exchanges

CHAT = "/v1/chat/completions"


def test_parse_takes_each_key_with_its_type():
    got = parse_sampling("temperature=0.6, top_p=0.95,top_k=20,seed=7,max_tokens=512", "--x")
    assert got == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 7, "max_tokens": 512}
    assert isinstance(got["top_k"], int) and isinstance(got["temperature"], float)
    assert parse_sampling(None, "--x") == {} and parse_sampling("  ", "--x") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("temp=1", r"^--x 'temp=1': use KEY=VALUE with KEY one of temperature, top_p"),
        ("temperature", r"^--x 'temperature': use KEY=VALUE"),
        ("logit_bias=1", r"^--x 'logit_bias=1': use KEY=VALUE"),
        ("temperature=hot", r"^--x temperature='hot': not a number$"),
        ("top_k=1.5", r"^--x top_k='1.5': not an integer$"),
        ("temperature=nan", r"^--x temperature='nan': not a finite number$"),
        ("temperature=-0.1", r"^--x temperature='-0.1': must be at least 0$"),
        ("top_p=0", r"^--x top_p='0': must be above 0 and at most 1$"),
        ("top_p=1.01", r"^--x top_p='1.01': must be above 0 and at most 1$"),
        ("top_k=-2", r"^--x top_k='-2': must be at least -1$"),
        ("min_p=2", r"^--x min_p='2': must be at least 0 and at most 1$"),
        ("presence_penalty=3", r"^--x presence_penalty='3': must be at least -2 and at most 2$"),
        ("repetition_penalty=0", r"^--x repetition_penalty='0': must be above 0$"),
        ("max_tokens=0", r"^--x max_tokens='0': must be at least 1$"),
        ("seed=1,seed=2", r"^--x: seed is given twice$"),
    ],
)
def test_parse_refuses_in_one_line(text, message):
    with pytest.raises(ContagentError, match=message):
        parse_sampling(text, "--x")


@given(st.text(max_size=40))
def test_parse_never_raises_anything_else(text):
    try:
        parse_sampling(text, "--x")
    except ContagentError as exc:
        assert "\n" not in str(exc)


def _apply(policy, body, route=CHAT):
    """(the body sent instead or None, the changes, the request record's sampling)."""
    flow = request_flow(body, route, False, [SamplingAddon(policy)])
    if flow is None:
        return SimpleNamespace(body=None, changes=[], sampling=None)
    sent = flow.body if flow.changes else None
    return SimpleNamespace(body=sent, changes=flow.changes, sampling=flow.record.get("sampling"))


def test_precedence_override_client_defaults_server_unknown():
    policy = SamplingPolicy(
        override={"temperature": 1.0}, defaults={"top_p": 0.9, "min_p": 0.05}
    ).learnt({"name": "vllm"}, {"top_k": 0, "min_p": 0.0})
    body = {"model": "m", "messages": [], "temperature": 0.2, "min_p": 0.1, "seed": 3}
    out = _apply(policy, body)
    s = out.sampling
    assert s["temperature"] == {"value": 1.0, "source": "override"}
    assert s["min_p"] == {"value": 0.1, "source": "client"}  # the client's beats defaults
    assert s["top_p"] == {"value": 0.9, "source": "defaults"}
    assert s["top_k"] == {"value": 0, "source": "server"}
    assert s["seed"] == {"value": 3, "source": "client"}
    assert s["presence_penalty"] is None  # the server's default was not learnt
    assert s["logit_bias"] == {"value": False, "source": "server"}
    assert s["max_tokens"] is None
    assert list(s) == list(SAMPLING_KEYS)
    assert out.changes == ["sampling.temperature", "sampling.top_p"]
    assert out.body["temperature"] == 1.0 and out.body["top_p"] == 0.9
    assert body["temperature"] == 0.2 and "top_p" not in body  # the client's body untouched


def test_nothing_set_leaves_the_clients_bytes():
    out = _apply(SamplingPolicy(), {"messages": [], "temperature": 0.5})
    assert out.body is None and out.changes == []
    assert out.sampling["temperature"] == {"value": 0.5, "source": "client"}
    assert out.sampling["seed"] is None  # not known to be vLLM: an unset seed is unknown
    same = _apply(SamplingPolicy(override={"temperature": 0.5}), {"temperature": 0.5})
    assert same.changes == [] and same.sampling["temperature"]["source"] == "override"


def test_a_null_is_unset_and_logit_bias_is_seen():
    policy = SamplingPolicy(defaults={"temperature": 0.7}).learnt({"name": "vllm"}, None)
    out = _apply(policy, {"temperature": None, "logit_bias": {"5": -100}})
    assert out.sampling["temperature"] == {"value": 0.7, "source": "defaults"}
    assert out.sampling["logit_bias"] == {"value": True, "source": "client"}
    assert out.sampling["seed"] == {"value": None, "source": "server"}  # vLLM: unseeded
    assert _apply(policy, {"logit_bias": {}}).sampling["logit_bias"]["value"] is False


def test_max_tokens_goes_in_each_apis_own_field():
    policy = SamplingPolicy(override={"max_tokens": 64})
    chat = _apply(policy, {"max_tokens": 10, "max_completion_tokens": 12})
    assert chat.body["max_completion_tokens"] == 64 and "max_tokens" not in chat.body
    assert _apply(SamplingPolicy(), {"max_tokens": 9}).sampling["max_tokens"]["value"] == 9
    resp = _apply(policy, {"input": "x"}, "/v1/responses")
    assert resp.body["max_output_tokens"] == 64
    msgs = _apply(SamplingPolicy(override={"max_tokens": 64, "min_p": 0.1}), {}, "/v1/messages")
    assert msgs.body == {"max_tokens": 64} and msgs.changes == ["sampling.max_tokens"]
    assert msgs.sampling["min_p"] is None  # the Messages API has none: not applied
    assert _apply(policy, {}, "/v1/completions").body == {"max_tokens": 64}


def test_other_routes_get_no_sampling():
    for route in ("/v1/models", "/v1/embeddings", "/v1/chat/completions/render"):
        out = _apply(SamplingPolicy(override={"temperature": 1.0}), {"x": 1}, route)
        assert out.sampling is None and out.body is None


def test_server_defaults_from_a_render_answer():
    params = {**VLLM_DEFAULTS, "max_tokens": 2000, "logit_bias": None, "n": 1}
    got = server_defaults(params)
    assert got == {k: VLLM_DEFAULTS[k] for k in SETTABLE if k != "max_tokens"}
    assert server_defaults({"top_p": 1.0}) is None  # no temperature: not a sampling_params
    assert server_defaults("nope") is None


def test_the_proxy_applies_and_records_it(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([Reply(content="a"), Reply(content="b")])
    policy = SamplingPolicy(override={"seed": 11}, defaults={"temperature": 0.6})
    proxy = proxy_factory(stub.url, sampling=policy)
    c = client(proxy)
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], temperature=0.1
    )
    (req0, _), (req1, _) = exchanges(tmp_path / "records", "r1")
    sent = [orjson.loads(r.body) for r in stub.requests]
    assert sent[0]["temperature"] == 0.6 and sent[0]["seed"] == 11
    assert sent[1]["temperature"] == 0.1 and sent[1]["seed"] == 11
    assert req0["upstream_changes"] == ["sampling.temperature", "sampling.seed"]
    assert req1["upstream_changes"] == ["sampling.seed"]
    assert "temperature" not in req0["body"]  # the recorded body stays the client's
    assert req0["sampling"]["temperature"] == {"value": 0.6, "source": "defaults"}
    assert req1["sampling"]["temperature"] == {"value": 0.1, "source": "client"}
    assert req0["sampling"]["seed"] == {"value": 11, "source": "override"}
    RequestRecord.model_validate(req0)
