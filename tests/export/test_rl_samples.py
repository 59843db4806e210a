"""RL samples: groups and advantages, the sampling that happened, the logprobs mode, what was
constrained, and which not-ready kinds still give samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pyarrow.parquet as pq
import pytest

from contagent.errors import ContagentError
from contagent.export.exporter import ExportOptions, export
from contagent.rawlog import reward as reward_file
from contagent.rules import groups, rl
from contagent.rules import sampling as sampling_rules
from contagent.rules.messages import NotReadyKind
from contagent.validate.check import validate
from tests.helpers import read_rows
from tools.rollouts import assistant, call
from tools.sample_base import TASK
from tools.token_rollouts import TokenRolloutBuilder

_CAT = {"command": "cat ~/workspace/secret.txt"}


def _solve(b: TokenRolloutBuilder) -> None:
    b.step(assistant("Let me read it.", call("call_1", "terminal", **_CAT)))
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant(None, call("call_2", "finish", message="Done.")))


def _write(root: Path, rid: str, result: dict[str, Any], play: Any = _solve, **attrs: Any) -> None:
    b = TokenRolloutBuilder(rid, TASK)
    for name, value in attrs.items():
        setattr(b, name, value)
    play(b)
    verdict = {"experiment": "task_a", "model": b.model, "started": 1.0, "ended": 2.0}
    b.write(root, {**verdict, "duration_s": 1.0, **result})


def _reward(value: float | None, status: str | None = None) -> dict[str, Any]:
    passed = None if value is None else value == 1.0
    return {"reward": value, "passed": passed, "status": status or "failed"}


def _export(runs: Path, out: Path, **options: Any) -> tuple[dict[str, dict], list[dict], Any]:
    options.setdefault("formats", ("tokens",))
    options.setdefault("filter", "all")
    summary = export([runs], out, ExportOptions(**options))
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    folder = out / "tokens" / "data"
    records = pq.read_table(folder).to_pylist() if folder.exists() else []
    report = validate(out / "results.jsonl")
    assert report.ok, report.violations
    return rows, records, summary


def _by(records: list[dict], rid: str) -> list[dict]:
    return [r for r in records if r["rollout_id"] == rid]


def test_a_group_with_rewards_1_0_half_gets_advantages_half_minus_half_0(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for rid, value in (("a", 1.0), ("a_r1", 0.0), ("a_r2", 0.5)):
        _write(runs, rid, _reward(value))
    _, records, summary = _export(runs, tmp_path / "out")
    for rid, want in (("a", 0.5), ("a_r1", -0.5), ("a_r2", 0.0)):
        mine = _by(records, rid)
        assert mine
        for rec in mine:
            assert rec["advantage"] == want
            assert rec["advantages"] == [want if m else 0.0 for m in rec["mask"]]
            assert any(rec["mask"])
            assert (rec["group_size"], rec["group_complete"]) == (3, True)
    assert len({r["group_id"] for r in records}) == 1  # from result.json, not from the names
    assert summary.token_groups is not None and summary.token_groups.groups == 1


def test_grpo_std_divides_by_the_std_and_a_flat_group_gets_0() -> None:
    attempts = [
        groups.Attempt(r, ("task", "t", "m"), v, False) for r, v in (("x", 1.0), ("y", 0.0))
    ]
    table = groups.group_table(attempts, "grpo-std")
    assert (table["x"].advantage, table["y"].advantage) == (1.0, -1.0)
    flat = [groups.Attempt(r, ("task", "t", "m"), 1.0, False) for r in ("x", "y")]
    assert {f.advantage for f in groups.group_table(flat, "grpo-std").values()} == {0.0}
    assert {f.advantage for f in groups.group_table(attempts, "none").values()} == {0.0}


def test_an_infra_error_leaves_its_group_short_and_a_group_of_one_gets_0(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs, "a", _reward(1.0))
    _write(runs, "a_r1", _reward(0.0, "infra_error"))
    _, records, summary = _export(runs, tmp_path / "out")
    (rec,) = _by(records, "a")
    assert (rec["group_size"], rec["group_complete"], rec["advantage"]) == (1, False, 0.0)
    assert not _by(records, "a_r1")
    assert summary.left_out["tokens"] == {"infra_error": 1}
    assert summary.token_groups is not None
    assert (summary.token_groups.singletons, summary.token_groups.short) == (1, 1)


def test_group_by_agent_splits_the_group() -> None:
    verdict = {"experiment": "t", "model": "m", "reward": 1.0}
    a = groups.attempt_of("a", {**verdict, "agent": "codex"}, ("agent",))
    b = groups.attempt_of("b", {**verdict, "agent": "openhands"}, ("agent",))
    assert a.key != b.key
    assert (
        groups.attempt_of("a", {**verdict, "agent": "codex"}).key
        == groups.attempt_of("b", {**verdict, "agent": "openhands"}).key
    )
    posted = groups.attempt_of("p", {"group": "g1", "reward": 0.0})
    assert posted.key == ("group", "g1")
    assert groups.attempt_of("q", {"reward": 0.0}).key == ("rollout", "q")


def test_a_rollout_without_a_reward_gives_no_samples(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs, "a", _reward(1.0))
    _write(runs, "b", _reward(None))
    _, records, summary = _export(runs, tmp_path / "out")
    assert not _by(records, "b") and _by(records, "a")
    assert summary.left_out["tokens"] == {"no_reward": 1}


def _proxy_only(root: Path, rid: str, reward: float | None, group: str | None) -> None:
    """A rollout the proxy recorded alone: no result.json; a harness posted its reward."""
    b = TokenRolloutBuilder(rid, TASK)
    _solve(b)
    paths = b.write(root)
    if reward is not None:
        post = reward_file.RewardPost(rollout_id=rid, reward=reward, group=group)
        reward_file.write_reward(paths.root, post)


def test_a_posted_reward_and_its_group_give_the_advantages(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for rid, value in (("p1", 1.0), ("p2", 0.0), ("p3", 0.5)):
        _proxy_only(runs, rid, value, "fix-the-bug")
    _proxy_only(runs, "q", 1.0, "another-task")
    _proxy_only(runs, "unrewarded", None, None)
    rows, records, summary = _export(runs, tmp_path / "out")
    for rid, want in (("p1", 0.5), ("p2", -0.5), ("p3", 0.0), ("q", 0.0)):
        (rec,) = _by(records, rid)
        assert rec["advantage"] == want and any(rec["mask"])
    assert rows["p1"]["reward"] == 1.0 and rows["unrewarded"]["reward"] is None
    assert {r["group_id"] for r in records} == {'["fix-the-bug"]', '["another-task"]'}
    assert not _by(records, "unrewarded")
    assert summary.left_out["tokens"] == {"no_reward": 1}
    assert summary.token_groups is not None
    assert (summary.token_groups.groups, summary.token_groups.singletons) == (2, 1)


def test_a_result_json_reward_is_not_replaced_by_a_posted_one(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs, "a", _reward(1.0))
    reward_file.write_reward(runs / "a", reward_file.RewardPost(rollout_id="a", reward=0.0))
    rows, _, _ = _export(runs, tmp_path / "out")
    assert rows["a"]["reward"] == 1.0


def test_a_malformed_reward_json_is_a_one_line_error(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _proxy_only(runs, "p", 1.0, None)
    (runs / "p" / "reward.json").write_text('{"schema_version": 1, "reward": "high"}')
    with pytest.raises(ContagentError, match=r"reward\.json: .*"):
        export([runs], tmp_path / "out", ExportOptions(formats=("tokens",), filter="all"))


def test_an_unknown_temperature_gives_no_samples_with_a_hint(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs, "a", _reward(1.0), server_sampling=None)  # a log without `sampling`
    rows, records, _ = _export(runs, tmp_path / "out")
    assert rows["a"]["tokens"]["kinds"] == ["unknown_sampling"] and not records
    assert "--sampling-defaults" in rows["a"]["tokens"]["reason"]


def test_a_client_temperature_in_an_older_log_is_known(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    extra = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}
    extra |= {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}
    _write(runs, "a", _reward(1.0), server_sampling=None, body_extra=extra, logprobs_mode=None)
    _, records, _ = _export(runs, tmp_path / "out")
    assert records and not any(r["sampling_modified"] for r in records)
    assert {r["logprobs_mode"] for r in records} == {None}


def test_temperature_0_gives_no_samples(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs, "a", _reward(1.0), body_extra={"temperature": 0.0})
    rows, records, _ = _export(runs, tmp_path / "out")
    assert rows["a"]["tokens"]["kinds"] == ["zero_temperature"] and not records


def test_temperatures_are_the_steps_and_never_nan(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs, "a", _reward(1.0), body_extra={"temperature": 0.6})
    _, records, _ = _export(runs, tmp_path / "out")
    for rec in records:
        assert rec["temperatures"] == pytest.approx([0.6] * len(rec["token_ids"]))
        assert rec["sampling_modified"] is True
        assert rec["logprobs_mode"] == "processed_logprobs"


@pytest.mark.parametrize(
    ("mode", "extra", "kind"),
    [
        ("raw_logprobs", {"temperature": 0.6}, "raw_logprobs"),
        ("raw_logprobs", {"top_p": 0.9}, "raw_logprobs"),
        ("raw_logprobs", {}, None),  # temperature 1, nothing else: raw is the sampled
        (None, {"temperature": 0.6}, "unknown_logprobs_mode"),
        (None, {}, None),
        ("processed_logprobs", {"temperature": 0.6}, None),
    ],
)
def test_the_logprobs_mode_decides(
    tmp_path: Path, mode: str | None, extra: dict[str, Any], kind: str | None
) -> None:
    runs = tmp_path / "runs"
    _write(runs, "a", _reward(1.0), body_extra=extra, logprobs_mode=mode)
    _, records, summary = _export(runs, tmp_path / "out")
    assert summary.left_out.get("tokens", {}) == ({kind: 1} if kind else {})
    assert bool(records) is (kind is None)
    _, allowed, _ = _export(runs, tmp_path / "allowed", allow_raw_logprobs=True)
    assert allowed


def _free_text_then_call(b: TokenRolloutBuilder) -> None:
    b.step(assistant("I will look at the file first.", call("call_1", "terminal", **_CAT)))
    b.tool_output("call_1", "terminal", "hunter2")
    b.step(assistant("The secret is hunter2."))


def test_strict_tools_under_auto_constrain_only_the_tool_call(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    tools = [
        {**t, "function": {**t["function"], "strict": True}}
        for t in TokenRolloutBuilder("x", TASK).tools
    ]
    _write(runs, "a", _reward(1.0), _free_text_then_call, tools=tools)
    rows, records, _ = _export(runs, tmp_path / "out")
    assert [s["constraint"] for s in rows["a"]["tokens"]["sampling"]] == ["tool_call", "tool_call"]
    for rec in records:
        assert not any(m and c for m, c in zip(rec["mask"], rec["constrained"], strict=True))
    # the step that opened a <tool_call> (id 5) has exactly that span constrained
    first = records[0]
    start = first["token_ids"].index(5)
    end = first["token_ids"].index(6, start) + 1
    assert [i for i, c in enumerate(first["constrained"]) if c] == list(range(start, end))
    assert any(first["mask"][:start])  # the free text before the call is trainable
    # the last step answered in free text: nothing of it is constrained
    last = records[-1]
    assert not any(last["constrained"][-10:]) and all(last["mask"][-10:])
    _, kept, _ = _export(runs, tmp_path / "kept", train_constrained=True)
    assert all(kept[0]["mask"][start:end]) and kept[0]["constrained"] == first["constrained"]


def test_a_span_that_cannot_be_located_constrains_the_whole_step() -> None:
    assert sampling_rules.constrained_ranges("tool_call", None, 4, True) == ((0, 4),)
    assert sampling_rules.constrained_ranges("tool_call", ["a", "b"], 3, False) == ((0, 3),)
    assert sampling_rules.constrained_ranges("tool_call", ["a", "b"], 2, True) == ((0, 2),)
    assert sampling_rules.constrained_ranges("tool_call", ["a", "b"], 2, False) == ()
    texts = ["ok ", "<", "tool", "_call>", "{}", "</tool_call>", " bye"]
    assert sampling_rules.constrained_ranges("tool_call", texts, 7, True) == ((1, 6),)
    assert sampling_rules.tool_call_spans(["<tool_call>", "{"]) == [(0, 2)]  # cut inside
    assert sampling_rules.constrained_ranges("none", None, 3, True) == ()


def test_every_not_ready_kind_is_classified() -> None:
    assert set(rl.NOT_READY_CLASS) == set(get_args(NotReadyKind))
    assert set(rl.NOT_READY_CLASS.values()) == {"model", "record"}


@pytest.mark.parametrize("kind", sorted(rl.NOT_READY_CLASS))
def test_each_not_ready_kind_gives_samples_as_classified(kind: str) -> None:
    row = {
        "training_ready": False,
        "not_ready_kinds": [kind],
        "tokens": {"kinds": []},
        "passed": True,
    }
    from contagent.rules.token_samples import selected_for_tokens

    assert selected_for_tokens(row, "all") is (rl.NOT_READY_CLASS[kind] == "model")
    assert (rl.model_kinds(row) == [kind]) is (rl.NOT_READY_CLASS[kind] == "model")


def _unknown_tool(b: TokenRolloutBuilder) -> None:
    b.step(assistant(None, call("call_1", "rm_rf", path="/")))
    b.tool_output("call_1", "rm_rf", "error: no such tool")
    b.step(assistant(None, call("call_2", "finish", message="Done.")))


def test_a_model_mistake_gives_samples_carrying_its_kind(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs, "a", _reward(0.0), _unknown_tool)
    rows, records, _ = _export(runs, tmp_path / "out")
    assert "unknown_tool" in rows["a"]["not_ready_kinds"]
    assert records and {tuple(r["not_ready_kinds"]) for r in records} == {("unknown_tool",)}


def test_token_options_read_back_and_refuse_what_they_do_not_know() -> None:
    options = rl.TokenOptions("grpo-std", ("agent",), True, True)
    assert rl.TokenOptions.read(options.stamp()) == options
    assert rl.TokenOptions.read(b'{"advantage": "ppo"}') is None
    assert rl.TokenOptions.read(b"not json") is None
    assert rl.TokenOptions.read(None) is None


def test_validate_reads_the_posted_reward_too(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for rid, value in (("p1", 1.0), ("p2", 0.0)):
        _proxy_only(runs, rid, value, "g")
    _export(runs, tmp_path / "out")  # healthy, with the posted rewards
    post = reward_file.RewardPost(rollout_id="p2", reward=0.25, group="g")
    reward_file.write_reward(runs / "p2", post)  # changed after the export
    report = validate(tmp_path / "out" / "results.jsonl")
    assert not report.ok
    assert any("reward is 0.0" in v.reason for v in report.violations), report.violations


def test_a_rollout_no_group_names_is_a_group_of_its_own_named_by_its_id(tmp_path: Path) -> None:
    """The export and validate name such a group alike, by the rollout's id (never by the
    folder it was read from, which is no part of the data and differs between machines)."""
    runs = tmp_path / "runs"
    _proxy_only(runs, "solo", 1.0, None)
    _, records, summary = _export(runs, tmp_path / "out")  # validate agrees with the export
    (rec,) = _by(records, "solo")
    assert (rec["group_id"], rec["group_size"], rec["advantage"]) == ('["solo"]', 1, 0.0)
    assert summary.token_groups is not None and summary.token_groups.singletons == 1
