"""The logprobs-mode probe against the real server in both modes: the tier's own server
(vLLM's default, raw_logprobs) and the tier's second one (``vllm_processed``), served with
``--logprobs-mode processed_logprobs --enable-scale-out`` (which also answers the render
route, so the server's default sampling is learnt)."""

from __future__ import annotations

import pytest

from contagent.proxy.identify import plan_tokens
from contagent.rawlog.records import ServerInfo
from tests.vllm import server as vllm_server

pytestmark = pytest.mark.vllm


def test_the_default_server_is_probed_raw(vllm: vllm_server.VllmServer) -> None:
    plan = plan_tokens("on", vllm.url)
    assert plan.server is not None and plan.server["logprobs_mode"] == "raw_logprobs"
    assert plan.server["logprobs_mode_how"].startswith("probed: gaps at temperature 0.5 are 1.0")
    ServerInfo.model_validate(plan.server)
    # Qwen3's template renders a system message after the first where it stands
    assert plan.server["inline_system"] == "in_place"
    assert plan.sampling is None  # no render route without --enable-scale-out
    # refused (403 or 404, by vLLM build) without --enable-scale-out
    assert "render answered 40" in plan.details[1] and "--enable-scale-out" in plan.details[1]


def test_a_processed_server_is_probed_processed(
    vllm_processed: vllm_server.VllmServer,
) -> None:
    plan = plan_tokens("on", vllm_processed.url)
    assert plan.server is not None and plan.server["logprobs_mode"] == "processed_logprobs"
    assert plan.server["logprobs_mode_how"].startswith("probed: gaps at temperature 0.5 are 2.0")
    # the tiny model has no generation_config: vLLM's neutral defaults
    assert plan.sampling is not None
    assert (plan.sampling["temperature"], plan.sampling["top_p"]) == (1.0, 1.0)
    assert plan.sampling["repetition_penalty"] == 1.0 and plan.sampling["seed"] is None
