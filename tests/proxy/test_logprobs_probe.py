"""The logprobs-mode probe and the server's default sampling, against the stub answering in
the real server's shapes (tests/vllm checks the same against vLLM in both modes)."""

from __future__ import annotations

import math

import pytest

from contagent.errors import ContagentError
from contagent.proxy import identify
from contagent.proxy.identify import plan_tokens
from contagent.proxy.probe import (
    PROBE_SEED,
    PROBE_TEMPERATURES,
    first_top_logprobs,
    judge,
    probe_body,
)
from contagent.rawlog.records import ServerInfo
from contagent.testing.llm_stub import Reply, start_stub_in_thread
from contagent.testing.stub_server_info import VLLM_DEFAULTS
from tests.proxy.helpers import client, exchanges


def _lp(logits: dict[str, float], t: float = 1.0) -> dict[str, float]:
    norm = math.log(sum(math.exp(v / t) for v in logits.values()))
    return {k: v / t - norm for k, v in logits.items()}


LOGITS = {"a": 3.0, "b": 1.0, "c": 0.0}


def test_judge_tells_raw_from_processed():
    mode, how = judge(_lp(LOGITS), _lp(LOGITS))
    assert mode == "raw_logprobs" and how.startswith("probed: ") and "1.00x" in how
    mode, how = judge(_lp(LOGITS), _lp(LOGITS, 0.5))
    assert mode == "processed_logprobs" and "2.00x" in how


def test_judge_says_when_it_cannot_tell():
    flat = {"a": 0.0, "b": 0.01}
    assert judge(_lp(flat), _lp(flat))[0] is None
    assert "within" in judge(_lp(flat), _lp(flat))[1]
    assert judge({"a": -1.0}, {"b": -1.0}) == (
        None, "probe inconclusive: the two answers share fewer than 2 top tokens"
    )  # fmt: skip
    odd = judge(_lp(LOGITS), _lp(LOGITS, 0.2))  # 5x: neither mode
    assert odd[0] is None and "5.00x" in odd[1]


def test_judge_refuses_logits():
    with pytest.raises(ContagentError, match=r"reports logits, not logprobs .*processed_logprobs"):
        judge(LOGITS, LOGITS)


def test_the_probe_request_is_fixed_and_neutral():
    body = probe_body("m", 0.5)
    assert body["temperature"] == 0.5 and body["seed"] == PROBE_SEED
    assert (body["max_tokens"], body["top_p"], body["top_k"], body["min_p"]) == (1, 1.0, 0, 0.0)
    assert body["logprobs"] is True and body["top_logprobs"] >= 2
    assert PROBE_TEMPERATURES == (1.0, 0.5)


def test_first_top_logprobs_reads_only_well_formed_entries():
    answer = {"choices": [{"logprobs": {"content": [{"top_logprobs": [
        {"token": "x", "logprob": -0.5}, {"token": "y", "logprob": "bad"},
        {"token": 3, "logprob": -1.0}, "junk", {"token": "z", "logprob": float("nan")},
    ]}]}}]}  # fmt: skip
    assert first_top_logprobs(answer) == {"x": -0.5}
    assert first_top_logprobs({"choices": []}) is None
    assert first_top_logprobs(None) is None


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_plan_probes_the_stubs_mode(mode):
    stub = start_stub_in_thread([], logprobs_mode=mode)
    try:
        plan = plan_tokens("auto", stub.url)
        assert plan.record and plan.server is not None
        assert plan.server["logprobs_mode"] == mode
        assert plan.server["logprobs_mode_how"].startswith("probed: ")
        ServerInfo.model_validate(plan.server)
        sent = [q.json for q in stub.stub.server_questions]
        assert [b.get("temperature") for b in sent[:2]] == [1.0, 0.5]
        assert all(b["seed"] == PROBE_SEED for b in sent[:2])
        assert [r.path for r in stub.requests] == ["/v1/models"]  # the probe is none of them
        assert plan.details[0] == f"logprobs: {mode} ({plan.server['logprobs_mode_how']})"
        assert plan.sampling is None and "render answered 404" in plan.details[1]
        # the token route's template decision and the context length the Responses echo needs
        assert plan.server["thinking_off_effort"] == "none"
        assert plan.server["max_model_len"] == 32768
        assert plan.details[3] == (
            "thinking disabled in Messages: reasoning_effort none (the template turns thinking off)"
        )
    finally:
        stub.stop()


@pytest.mark.parametrize("mode", ["raw_logits", "processed_logits"])
def test_a_logits_server_is_refused(mode):
    stub = start_stub_in_thread([], logprobs_mode=mode)
    try:
        with pytest.raises(ContagentError, match=r"^--tokens on: the upstream reports logits"):
            plan_tokens("on", stub.url)
        auto = plan_tokens("auto", stub.url)
        assert not auto.record and auto.server is None
        assert auto.line.startswith("tokens: not recorded (the upstream reports logits")
        off = plan_tokens("off", stub.url)  # not probed: nothing to refuse
        assert off.server is not None and off.server["logprobs_mode"] is None
    finally:
        stub.stop()


def test_render_gives_the_servers_defaults_and_they_are_recorded(proxy_factory, tmp_path):
    defaults = {**VLLM_DEFAULTS, "temperature": 0.7, "top_k": 20}
    stub = start_stub_in_thread([Reply(content="ok")], render_defaults=defaults)
    try:
        proxy = proxy_factory(stub.url)
        plan = proxy.proxy.plan_tokens("auto")
        assert plan.sampling is not None and plan.sampling["temperature"] == 0.7
        assert (
            plan.details[1]
            == "sampling: server sampling defaults from POST /v1/chat/completions/render"
        )
        client(proxy).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], top_p=0.5
        )
        [(req, out)] = exchanges(tmp_path / "records", "r1")
        assert req["server"]["logprobs_mode"] == "raw_logprobs"
        s = req["sampling"]
        assert s["temperature"] == {"value": 0.7, "source": "server"}
        assert s["top_k"] == {"value": 20, "source": "server"}
        assert s["top_p"] == {"value": 0.5, "source": "client"}
        assert s["seed"] == {"value": None, "source": "server"}
        assert out is not None and out["outcome"] == "completed"
    finally:
        stub.stop()


@pytest.mark.parametrize(("refuses", "decided"), [(False, "in_place"), (True, "merged")])
def test_plan_probes_how_the_template_takes_a_later_system_message(refuses, decided):
    stub = start_stub_in_thread([], refuses_inline_system=refuses)
    try:
        plan = plan_tokens("auto", stub.url)
        assert plan.server is not None and plan.server["inline_system"] == decided
        ServerInfo.model_validate(plan.server)
        asked = [
            q.json["messages"]
            for q in stub.stub.server_questions
            if len(q.json.get("messages", ())) == 4
        ]
        assert [[m["role"] for m in a] for a in asked] == [["system", "user", "system", "user"]]
        assert plan.details[2].startswith("a system message inside Messages: ")
        assert ("merged" in plan.details[2]) is refuses
        assert [r.path for r in stub.requests] == ["/v1/models"]  # no move of the script used
        off = plan_tokens("off", stub.url)  # --tokens off probes nothing
        assert off.server is not None and "inline_system" not in off.server
    finally:
        stub.stop()


def test_the_probes_have_their_own_deadline_beside_the_identifying_gets(monkeypatch):
    """A cold or busy server may take far longer to generate than to list its models: the
    probes' bound is not what is left of the identifying GETs' few seconds."""
    made: list[float] = []
    real = identify.UpstreamAsk

    def recording(timeout_s, tls):
        made.append(timeout_s)
        return real(timeout_s, tls)

    monkeypatch.setattr(identify, "UpstreamAsk", recording)
    stub = start_stub_in_thread([])
    try:
        plan = plan_tokens("auto", stub.url)
    finally:
        stub.stop()
    assert plan.record and plan.server is not None
    assert made == [identify.IDENTIFY_TIMEOUT_S, identify.PROBE_TIMEOUT_S]
    assert identify.PROBE_TIMEOUT_S > identify.IDENTIFY_TIMEOUT_S


@pytest.mark.parametrize("tokens", ["auto", "on"])
def test_an_unanswered_probe_leaves_the_mode_unknown_not_the_server(monkeypatch, tokens):
    def no_answer(*args, **kwargs):
        raise TimeoutError("the upstream did not answer in time")

    monkeypatch.setattr(identify, "probe_logprobs_mode", no_answer)
    stub = start_stub_in_thread([])
    try:
        plan = plan_tokens(tokens, stub.url)
    finally:
        stub.stop()
    assert plan.record and plan.server is not None and plan.server["name"] == "vllm"
    assert plan.server["logprobs_mode"] is None
    assert plan.server["logprobs_mode_how"].startswith("not probed: no answer (TimeoutError")
    assert plan.details == (f"probes: {plan.server['logprobs_mode_how']}",)
    ServerInfo.model_validate(plan.server)
