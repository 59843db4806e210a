"""``--chat-template``: samples per rollout with and without a prefix-keeping template.

The same conversations run through two recording proxies into the tier's server (served
with ``--trust-request-chat-template``): one as the client sends them (Qwen3's own
template, which re-renders earlier turns), and one with the proxy's ``chat_template``
option set to trl's prefix-keeping Qwen3 training template. The tokens format then gives
one sample per run of steps whose prompts extend each other. Measured with the tiny model:
four plain answers give 4 samples without the template and 2 with it; an agent's loop of
three forced calls gives 3 either way. No template can keep the prefix across a forced call
on vLLM's chat route: the grammar of a named ``tool_choice`` is the tool's parameters
schema (``required``'s an array of name and parameters objects), so the model samples the
bare arguments, while every template renders the call in the history as its own text
(Qwen3's: ``<tool_call>``, the name and the arguments, ``</tool_call>``).
:func:`test_a_forced_call_is_sampled_bare_and_rendered_in_tool_call_tags` holds that.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.proxy import RunningProxy, start_proxy_in_thread
from contagent.proxy.identify import plan_tokens
from contagent.rawlog import reward as reward_file
from contagent.rawlog.read import read_exchanges
from tests.vllm import server as vllm_server
from tests.vllm.conversations import Chat, Meta, answer_calls, history_message, start

pytestmark = pytest.mark.vllm


def _answers(chat: Chat) -> None:
    """Four plain answers, the user asking for more between them."""
    history = start()
    for n in range(4):
        history.append(history_message(chat.ask(history, end_bias=10.0)))
        if n < 3:
            history.append({"role": "user", "content": "Go on."})


def _calls(chat: Chat) -> None:
    """An agent's loop: two forced terminal calls with their results, then a forced finish."""
    history = start()
    for tool in ("terminal", "terminal", "finish"):
        answer_calls(history, chat.ask(history, tool=tool, max_tokens=100), "hunter2")


CONVERSATIONS: dict[str, Callable[[Chat], None]] = {"answers": _answers, "calls": _calls}


@pytest.fixture(scope="module")
def templated(vllm: vllm_server.VllmServer, meta: Meta, record_dir: Path) -> Iterator[RunningProxy]:
    plan = plan_tokens("on", vllm.url)
    with start_proxy_in_thread(
        vllm.url, record_dir, tokens=True, server=plan.server,
        chat_template=meta.training_template,
    ) as running:  # fmt: skip
        yield running


def _samples(record_dir: Path, rid: str, tmp_path: Path) -> tuple[int, int, list[list[str]]]:
    """(steps, samples, each request's upstream changes) of one rollout's export."""
    runs = tmp_path / rid
    shutil.copytree(record_dir / rid, runs / rid)
    reward_file.write_reward(runs / rid, reward_file.RewardPost(rollout_id=rid, reward=1.0))
    out = tmp_path / f"{rid}-out"
    # the conversations steer the model with logit_bias, which the raw mode does not report
    export([runs], out, ExportOptions(formats=("tokens",), filter="all", allow_raw_logprobs=True))
    records = pq.read_table(out / "tokens" / "data").to_pylist()
    assert records, f"{rid} gave no samples"
    raw = read_exchanges(runs / rid / "exchanges.jsonl")
    changes = [r.get("upstream_changes") or [] for r in raw.requests.values()]
    return len(raw.requests), len(records), changes


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_a_prefix_keeping_template_gives_fewer_samples(
    name: str, proxy: RunningProxy, templated: RunningProxy, meta: Meta, record_dir: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    counts = {}
    for label, through in (("plain", proxy), ("template", templated)):
        rid = f"chat_template_{name}_{label}"
        CONVERSATIONS[name](Chat(through.rollout_base_url(rid), meta, seed=3, temperature=1.0))
        counts[label] = _samples(record_dir, rid, tmp_path)
    (steps, plain, plain_changes), (_, kept, kept_changes) = counts["plain"], counts["template"]
    print(f"{name}: {steps} steps; samples without --chat-template {plain}, with it {kept}")
    assert all("chat_template" not in c for c in plain_changes)
    assert all("chat_template" in c for c in kept_changes)
    assert plain == steps  # Qwen3's own template re-renders every earlier turn
    # measured: answers 4 steps, 4 samples without, 2 with; calls 3 steps, 3 and 3
    assert kept <= plain
    if name == "answers":
        assert kept < plain


#: the tiny tokenizer's added token that opens a call in Qwen3's templates
TOOL_CALL_ID = 2000


def test_a_forced_call_is_sampled_bare_and_rendered_in_tool_call_tags(
    templated: RunningProxy, meta: Meta, record_dir: Path
) -> None:
    rid = "chat_template_calls_tags"
    _calls(Chat(templated.rollout_base_url(rid), meta, seed=3, temperature=1.0))
    raw = read_exchanges(record_dir / rid / "exchanges.jsonl")
    outcomes = [raw.outcomes[i]["tokens"] for i in sorted(raw.outcomes)]
    assert len(outcomes) == 3
    # the tools' instructions in the system turn show the tags too
    shown = outcomes[0]["prompt_token_ids"].count(TOOL_CALL_ID)
    for n, tokens in enumerate(outcomes):
        # each earlier call is in this prompt inside <tool_call> tags; none was sampled so
        assert tokens["prompt_token_ids"].count(TOOL_CALL_ID) == shown + n, n
        assert TOOL_CALL_ID not in tokens["choices"][0]["token_ids"], n
