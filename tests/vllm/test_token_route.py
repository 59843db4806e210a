"""The token route against the real server: what the real Claude Code and Codex sent, replayed
through the recording proxy, which serves Messages and Responses from vLLM's chat route.

A second, module-scoped server runs with ``--enable-scale-out`` for vLLM's render routes
(``/v1/messages/render``, ``/v1/responses/render``), in ``processed_logprobs`` mode (as RL
serves), with a context long enough for the agents' real requests (:data:`REPLAY_FLAGS`).
A proxy with tokens on stands in front of it. For every request the agents sent
(:mod:`tests.vllm.agent_fixtures`):

- greedy (temperature 0, no prefix cache), JSON and streamed, the client receives from the
  proxy what vLLM's own route sends: the same body, the same events, field by field, except
  what vLLM draws at random per answer (:mod:`tests.vllm.replay`); so the same output, stop
  reason and usage;
- the prompt ids the proxy recorded equal vLLM's own rendering of the client's request;
- replayed as the agent sent it (no temperature: the server's default applies; a stop
  string so that the random model's answers end, :meth:`Recorded.ending`), the proxy's
  rollouts export token samples whose logprobs a transformers recompute of the same weights
  matches, as for chat, and that the recompute read one position off does not.

The same holds for variants of those requests in which the model answers in text or calls a
tool, JSON and streamed (:mod:`tests.vllm.route_cases`); replayed as sent, their token
samples mark ``constrained`` the steps a forced tool choice's grammar shaped, and only those.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.layout import RolloutPaths
from contagent.proxy import RunningProxy, start_proxy_in_thread
from contagent.proxy.identify import plan_tokens
from contagent.proxy.sampling_options import SamplingPolicy
from contagent.rawlog.read import read_exchanges
from contagent.rawlog.result import RolloutResult
from contagent.validate.check import validate
from tests.helpers import read_rows
from tests.vllm import agent_fixtures, route_cases
from tests.vllm import server as vllm_server
from tests.vllm.agent_fixtures import Recorded
from tests.vllm.conversations import MODEL, Meta
from tests.vllm.replay import coalesced, masked, post, settled, sse, stream_events
from tests.vllm.route_cases import summary

pytestmark = pytest.mark.vllm

#: The replay server: render routes, RL's logprobs mode, and a context for Claude Code's
#: ~22,000-token requests (the tiny model's RoPE has no trained length to keep to).
REPLAY_FLAGS = (
    *vllm_server.PROCESSED, "--max-model-len", str(agent_fixtures.MAX_MODEL_LEN),
    "--hf-overrides", json.dumps({"max_position_embeddings": agent_fixtures.MAX_MODEL_LEN}),
)  # fmt: skip
REQUESTS = [*agent_fixtures.CLAUDE_CODE, *agent_fixtures.CODEX]
#: the stop string and token limit of the replay as sent (a newline comes about every 100
#: tokens at the server's default temperature, and would not in 1000 about once in e^10)
ENDING = ("\n", 1000)
#: tolerances around the measured figures, which the test prints and docs/tokens.md gives
#: ("Against the real server": bf16 serving against an fp32 recompute)
AGREE_MAX = 0.1
SHIFTED_MIN = 1.0


@pytest.fixture(scope="module")
def scaled(meta: Meta, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    log = tmp_path_factory.mktemp("vllm-scaled") / "server.log"
    with (
        vllm_server.serving(meta.model_dir, log, *REPLAY_FLAGS) as srv,
        httpx.Client(base_url=srv.url, timeout=600) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def route_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("token-route")


@pytest.fixture(scope="module")
def route_proxy(scaled: httpx.Client, route_dir: Path) -> Iterator[RunningProxy]:
    """The proxy as ``contagent run --tokens on`` starts it: the server's template decisions
    and default sampling probed, Messages and Responses served from the chat route."""
    upstream = str(scaled.base_url).rstrip("/")
    plan = plan_tokens("on", upstream)
    assert plan.server is not None and plan.server.get("thinking_off_effort") == "none"
    assert plan.server["max_model_len"] == agent_fixtures.MAX_MODEL_LEN
    sampling = SamplingPolicy().learnt(plan.server, plan.sampling)
    with start_proxy_in_thread(
        upstream, route_dir, tokens=True, server=plan.server, sampling=sampling
    ) as running:
        yield running


@dataclass
class Replayed:
    """One request's answers: vLLM's own route's and the proxy's, JSON and streamed
    (``native`` ``{"refused": text}`` where vLLM's route answered the JSON request 400)."""

    rendered: list[int]
    native: dict[str, Any]
    ours: dict[str, Any]
    native_stream: list[dict[str, Any]]
    ours_stream: list[dict[str, Any]]


def _native_json(scaled: httpx.Client, req: Recorded, body: dict[str, Any]) -> dict[str, Any]:
    if req.id in route_cases.SHOWS and route_cases.SHOWS[req.id][0] is None:
        resp = scaled.post(req.path, json=body, headers=req.headers)
        assert resp.status_code == 400, resp.text[:500]
        return {"refused": resp.text}
    return post(scaled, req.path, body, req.headers)


def _replay(scaled: httpx.Client, proxy: httpx.Client, req: Recorded) -> Replayed:
    body = {**req.body, "temperature": 0}
    route = req.path.split("?")[0]
    lone = {**body, "stream": False}
    return Replayed(
        rendered=post(scaled, route + "/render", body, req.headers)["token_ids"],
        native=_native_json(scaled, req, lone),
        ours=post(proxy, f"/r/{req.id}-json{req.path}", lone, req.headers),
        native_stream=stream_events(sse(scaled, req.path, body, req.headers)),
        ours_stream=stream_events(sse(proxy, f"/r/{req.id}-stream{req.path}", body, req.headers)),
    )


@pytest.fixture(scope="module")
def replayed(
    scaled: httpx.Client, route_proxy: RunningProxy, route_dir: Path, meta: Meta
) -> Iterator[dict[str, Replayed]]:
    """Every request and every variant (:mod:`tests.vllm.route_cases`) replayed greedily both
    ways, then each conversation once more through the proxy as the agent sent it (rollouts
    ``claude_code`` and ``codex``, in turn order) and each variant so (rollout: its id)."""
    varied = route_cases.variants(meta)
    with httpx.Client(base_url=route_proxy.url, timeout=600) as proxy:
        done = {req.id: _replay(scaled, proxy, req) for req in [*REQUESTS, *varied.values()]}
        for req in REQUESTS:
            sse(proxy, f"/r/{req.agent}{req.path}", req.ending(*ENDING), req.headers)
        for req in varied.values():
            body = route_cases.as_sent(req, *ENDING)
            sse(proxy, f"/r/{req.id}{req.path}", body, req.headers)
    for rollout in [*(f"{r}-{kind}" for r in done for kind in ("json", "stream")),
                    "claude_code", "codex", *varied]:  # fmt: skip
        settled(RolloutPaths.for_rollout(route_dir, rollout).exchanges)
    yield done


def _prompt_ids(route_dir: Path, rollout: str) -> list[list[int]]:
    raw = read_exchanges(RolloutPaths.for_rollout(route_dir, rollout).exchanges)
    return [o["tokens"]["prompt_token_ids"] for _, o in sorted(raw.outcomes.items())]


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: r.id)
def test_through_the_token_route_the_client_gets_what_vllms_own_route_sends(
    replayed: dict[str, Replayed], route_dir: Path, req: Recorded
) -> None:
    got = replayed[req.id]
    # the model saw what vLLM's own route renders, JSON and streamed
    assert _prompt_ids(route_dir, f"{req.id}-json") == [got.rendered]
    assert _prompt_ids(route_dir, f"{req.id}-stream") == [got.rendered]
    # the same output, stop reason and usage, every field the client reads
    assert masked(got.ours) == masked(got.native)
    assert masked(coalesced(got.ours_stream)) == masked(coalesced(got.native_stream))
    assert got.native["usage"]["input_tokens"] == len(got.rendered)  # no prefix cache


@pytest.mark.parametrize("rid", list(route_cases.SHOWS))
def test_text_and_tool_calls_through_the_token_route_answer_as_vllms_own_routes(
    replayed: dict[str, Replayed], route_dir: Path, rid: str
) -> None:
    got = replayed[rid]
    lone, streamed = route_cases.SHOWS[rid]
    assert _prompt_ids(route_dir, f"{rid}-json") == [got.rendered]
    assert _prompt_ids(route_dir, f"{rid}-stream") == [got.rendered]
    assert masked(coalesced(got.ours_stream)) == masked(coalesced(got.native_stream))
    assert summary(got.native_stream) == streamed  # the model called a tool, or wrote text
    if lone is not None:
        assert masked(got.ours) == masked(got.native)
        assert summary(got.native) == lone
        return
    # vLLM's JSON route cannot answer a call whose arguments are no object (route_cases); the
    # token route answers the call its stream holds, as vLLM's own stream does
    assert route_cases.NATIVE_REFUSAL in got.native["refused"]
    assert summary(got.ours) == streamed
    sent = "".join(
        e["delta"]["partial_json"] for e in got.native_stream
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    )  # fmt: skip
    assert [b["input"] for b in got.ours["content"]] == [json.loads(sent)]


def _passed(route_dir: Path, rollouts: list[str]) -> list[Path]:
    """The rollouts' folders, each given a passed ``result.json`` so that it exports."""
    for rid in rollouts:
        result = RolloutResult(
            rollout_id=rid, experiment="agents-vllm", model=MODEL,
            status="passed", passed=True, reward=1.0, stop_condition="finished",
        )  # fmt: skip
        RolloutPaths.for_rollout(route_dir, rid).result.write_text(result.model_dump_json())
    return [RolloutPaths.for_rollout(route_dir, rid).root for rid in rollouts]


def _export_conversations(route_dir: Path, out: Path) -> list[dict[str, Any]]:
    runs = _passed(route_dir, ["claude_code", "codex"])
    export(runs, out, ExportOptions(formats=("tokens",), filter="all"))
    report = validate(out / "results.jsonl")
    assert report.ok, report.violations
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    for agent in ("claude_code", "codex"):
        assert rows[agent]["tokens"]["kinds"] == [], rows[agent]["tokens"]
        # the history replayed holds the stand-in's answers, not this model's: each request
        # is a branch of its own, one sample each
        assert rows[agent]["tokens"]["samples"] == [1, 1, 1], rows[agent]["tokens"]
    return list(pq.read_table(out / "tokens" / "data").to_pylist())


def test_the_agents_rollouts_export_token_samples_the_recompute_matches(
    replayed: dict[str, Replayed], route_dir: Path, meta: Meta, tmp_path: Path
) -> None:
    from tests.vllm.trainer import recompute

    samples = _export_conversations(route_dir, tmp_path / "out")
    assert len(samples) == len(REQUESTS)
    seqs, wanted = [], []
    for rec in samples:
        trained = [
            p
            for p, (m, c) in enumerate(zip(rec["mask"], rec["constrained"], strict=True))
            if m and not c
        ]
        # one forward pass gives each position's logprob and its neighbour's, read one off
        seqs.append((rec["token_ids"], sorted({*trained, *(p - 1 for p in trained)})))
        wanted.append((trained, [rec["logprobs"][p] for p in trained]))
    same: list[float] = []
    off: list[float] = []
    for (_, positions), (trained, recorded), values in zip(
        seqs, wanted, recompute(meta.model_dir, seqs), strict=True
    ):
        at = dict(zip(positions, values, strict=True))
        same += [abs(at[p] - r) for p, r in zip(trained, recorded, strict=True)]
        off += [abs(at[p - 1] - r) for p, r in zip(trained, recorded, strict=True)]
    assert len(same) >= 100, "too few trained tokens to compare"
    mean, shifted = sum(same) / len(same), sum(off) / len(off)
    print(f"recorded vs recompute: mean |diff| {mean:.3f}, one position off {shifted:.3f}")
    assert mean < AGREE_MAX
    assert shifted > SHIFTED_MIN


def test_the_variants_token_samples_mark_constrained_what_the_grammar_shaped(
    replayed: dict[str, Replayed], route_dir: Path, meta: Meta, tmp_path: Path
) -> None:
    """Each variant as sent (the server's default sampling): a forced tool choice's step is
    marked ``constrained`` throughout, where the recompute finds tokens the grammar shaped,
    and left out of ``mask``; a text answer's is not marked, and no token of it was shaped
    (the criterion of tests/vllm/test_constraints.py)."""
    from tests.vllm.trainer import GAP, recompute

    rids = list(route_cases.SHOWS)
    runs = _passed(route_dir, rids)
    export(runs, tmp_path / "out", ExportOptions(formats=("tokens",), filter="all"))
    rows = {r["rollout_id"]: r for r in read_rows(tmp_path / "out" / "results.jsonl")}
    samples = {
        r["rollout_id"]: r for r in pq.read_table(tmp_path / "out" / "tokens" / "data").to_pylist()
    }
    assert samples.keys() == set(rids)
    seqs = []
    for rid in rids:
        tokens = rows[rid]["tokens"]
        assert (tokens["kinds"], tokens["samples"]) == ([], [1]), tokens
        (step,) = tokens["sampling"]
        assert step["constraint"] == ("step" if rid in route_cases.FORCED else "none")
        rec, (prompt,) = samples[rid], _prompt_ids(route_dir, rid)
        sampled = range(len(prompt), len(rec["token_ids"]))
        assert rec["token_ids"][: len(prompt)] == prompt and len(sampled) > 0
        forced = rid in route_cases.FORCED
        assert rec["constrained"] == [
            forced and p in sampled for p in range(len(prompt) + len(sampled))
        ]
        assert rec["mask"] == [not forced and p in sampled for p in range(len(rec["mask"]))]
        seqs.append((rec["token_ids"], list(sampled)))
    for rid, (_, positions), values in zip(
        rids, seqs, recompute(meta.model_dir, seqs), strict=True
    ):
        recorded = [samples[rid]["logprobs"][p] for p in positions]
        gaps = [abs(a - b) for a, b in zip(recorded, values, strict=True)]
        print(f"{rid}: {len(gaps)} sampled, largest gap {max(gaps):.2f}")
        if rid in route_cases.FORCED:
            assert max(gaps) > GAP, f"{rid}: marked constrained, but nothing was shaped: {gaps}"
        else:
            assert max(gaps) < GAP, f"{rid}: a token shaped in an unconstrained step: {gaps}"
