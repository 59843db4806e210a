"""One test (at least) per export rule, on the pure functions and on whole exports."""

from __future__ import annotations

from pathlib import Path

from contagent import rules
from contagent.export.derive import build_row
from contagent.rules import history_keys, merge_tool_fragments, tool_protocol_problems
from contagent.wire.chat import USAGE_FIELDS
from tools.rollouts import RolloutBuilder, assistant, call, parts


def chat(finish: str | None, **extra: object) -> dict:
    return {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": finish}
        ],
        **extra,
    }


# -- completeness ----------------------------------------------------------------------
def test_completeness_completed_needs_200_body_and_clean_finish() -> None:
    assert rules.completeness(200, chat("stop"))[0]
    assert rules.completeness(200, chat("tool_calls"))[0]
    assert rules.completeness(200, chat("function_call"))[0]
    assert not rules.completeness(200, chat("length"))[0]
    assert not rules.completeness(200, chat("content_filter"))[0]
    assert not rules.completeness(200, chat(None))[0]
    assert not rules.completeness(500, chat("stop"))[0]
    assert not rules.completeness(200, None)[0]
    assert not rules.completeness(200, "not json")[0]


def test_completeness_responses_api_status_and_echoed_truncation_setting() -> None:
    ok = {"object": "response", "status": "completed", "truncation": "disabled", "output": []}
    assert rules.completeness(200, ok) == (True, None)
    assert not rules.completeness(200, {**ok, "status": "incomplete"})[0]
    assert not rules.completeness(
        200, {**ok, "incomplete_details": {"reason": "max_output_tokens"}}
    )[0]
    assert rules.completeness(200, chat("stop", truncation="disabled"))[0]


# -- consumption by identity -----------------------------------------------------------
def test_consumption_by_identity_tool_calls_match_by_exact_id_never_substring() -> None:
    key = rules.consumption_key(assistant(None, call("call_1", "terminal", command="ls")))
    ids, texts = history_keys([assistant(None, call("call_10", "terminal", command="ls"))])
    assert not rules.carries(key, ids, texts)
    ids, texts = history_keys([assistant(None, call("call_1", "terminal", command="ls"))])
    assert rules.carries(key, ids, texts)


def test_consumption_by_identity_text_answers_match_by_canonical_text() -> None:
    key = rules.consumption_key({"role": "assistant", "content": "Done."})
    ids, texts = history_keys([{"role": "assistant", "content": parts("Done.")}])
    assert rules.carries(key, ids, texts)
    ids, texts = history_keys([{"role": "assistant", "content": parts("Done!")}])
    assert not rules.carries(key, ids, texts)


# -- retries vs restarts ---------------------------------------------------------------
def _export(tmp_path: Path, b: RolloutBuilder, result: dict | None = None) -> dict:
    return build_row(b.write(tmp_path, result or {"passed": True})).row


def test_retries_vs_restarts_keeps_the_consumed_copy_of_a_retry(tmp_path: Path) -> None:
    b = RolloutBuilder("r", "task")
    first = b.request()
    b.outcome(first, "completed", message=assistant(None, call("call_a", "terminal", command="ls")))
    b.step(assistant(None, call("call_b", "terminal", command="ls")))  # same body: a retry
    b.tool_output("call_b", "terminal", "out")
    b.step(assistant(None, call("call_c", "finish", message="ok")))
    row = _export(tmp_path, b)
    assert [s["exchange_index"] for s in row["steps"]] == [1, 2]
    [dup] = row["excluded"]
    assert (dup["exchange_index"], dup["reason"], dup["duplicate_of"]) == (0, "duplicate_retry", 1)
    assert row["training_ready"]


def test_retries_vs_restarts_keeps_last_safe_copy_when_none_is_consumed(tmp_path: Path) -> None:
    b = RolloutBuilder("r", "task")
    for text in ("Answer one.", "Answer two."):
        i = b.request()
        b.outcome(i, "completed", message=assistant(text))
    row = _export(tmp_path, b)
    assert [s["exchange_index"] for s in row["steps"]] == [1]
    assert row["excluded"][0]["reason"] == "duplicate_retry"


def test_retries_vs_restarts_drops_unconsumed_nonterminal_call_the_agent_moved_past(
    tmp_path: Path,
) -> None:
    b = RolloutBuilder("r", "task")
    b.step(assistant(None, call("call_1", "terminal", command="pwd")), consume=False)
    b.user("continue")
    b.step(assistant(None, call("call_2", "finish", message="ok")))
    row = _export(tmp_path, b)
    assert [(e["exchange_index"], e["reason"]) for e in row["excluded"]] == [(0, "unconsumed")]
    assert row["training_ready"]


def test_retries_vs_restarts_keeps_final_response_even_if_nonterminal(tmp_path: Path) -> None:
    b = RolloutBuilder("r", "task")
    b.step(assistant(None, call("call_1", "terminal", command="pwd")), consume=False)
    row = _export(tmp_path, b)
    assert [s["exchange_index"] for s in row["steps"]] == [0]


# -- fragment repair -------------------------------------------------------------------
def test_fragment_repair_merges_adjacent_fragments_with_newline() -> None:
    msgs = [
        assistant(None, call("c1", "terminal", command="ls")),
        {"role": "tool", "tool_call_id": "c1", "content": parts("a")},
        {"role": "tool", "tool_call_id": "c1", "content": parts("b")},
        {"role": "tool", "tool_call_id": "c1", "content": "c"},
    ]
    fixed, repairs = merge_tool_fragments(msgs)
    assert len(fixed) == 2 and fixed[1]["content"] == "a\nb\nc"
    assert repairs == [{"tool_call_id": "c1", "fragments": 3}]
    assert merge_tool_fragments(fixed) == (fixed, [])


def test_fragment_repair_orphan_tool_message_is_not_repaired_away() -> None:
    msgs = [
        assistant(None, call("c1", "terminal", command="ls")),
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "user", "content": "x"},
        {"role": "tool", "tool_call_id": "c1", "content": "again"},
    ]
    fixed, repairs = merge_tool_fragments(msgs)
    assert fixed is msgs and not repairs
    assert tool_protocol_problems(fixed) == [
        ("tool_protocol", "tool message 3 answers no pending call ('c1')")
    ]


# -- fail closed -----------------------------------------------------------------------
def test_fail_closed_gap_and_outcome_without_request_make_rollout_not_ready(tmp_path: Path) -> None:
    b = RolloutBuilder("r", "task")
    b.step(assistant("ok"))
    b.lines.append(b.lines[-1].replace(b'"index":0', b'"index":2'))  # an outcome for 2, no 1
    row = _export(tmp_path, b)
    assert not row["training_ready"]
    assert "index gap: no record for 1" in row["training_ready_reason"]
    assert {e["reason"] for e in row["excluded"]} == {"no_request"}


def test_fail_closed_every_index_accounted_for_exactly_once(samples: Path) -> None:
    from contagent.layout import find_rollouts
    from contagent.rawlog.read import read_exchanges
    from contagent.validate.invariants import accounting_problems

    for paths in find_rollouts([samples]):
        row = build_row(paths).row
        assert accounting_problems(row, read_exchanges(paths.exchanges).indices) == []
        bad = (
            {**row, "excluded": row["excluded"][1:]}
            if row["excluded"]
            else {**row, "steps": row["steps"][1:]}
        )
        assert accounting_problems(bad, read_exchanges(paths.exchanges).indices)


# -- tool union ------------------------------------------------------------------------
def test_tool_union_collapses_repeats_and_flags_conflicts() -> None:
    a = {"type": "function", "function": {"name": "a", "parameters": {}}}
    b = {"type": "function", "function": {"name": "b", "parameters": {}}}
    a2 = {"type": "function", "function": {"name": "a", "parameters": {"x": 1}}}
    assert rules.tool_union([[a], [a, b]]) == ([a, b], [])
    assert rules.tool_union([[a], [a2]]) == ([a], ["a"])


def test_tool_union_branch_tools_unions_each_branch_on_its_own() -> None:
    a = {"type": "function", "function": {"name": "a", "parameters": {}}}
    b = {"type": "function", "function": {"name": "b", "parameters": {}}}
    steps = [(0, {"tools": [a]}), (1, {"tools": [b]}), (0, {"tools": [a, b]}), (1, "unreadable")]
    assert rules.branch_tools(steps) == {0: [a, b], 1: [b]}


# -- truncation ------------------------------------------------------------------------
def test_truncation_row_truncated_on_timeout_not_on_clean_stop(tmp_path: Path) -> None:
    b = RolloutBuilder("r", "task")
    b.step(assistant("ok"))
    assert not _export(tmp_path / "a", b, {"stop_condition": "finished"})["truncated"]
    row = _export(tmp_path / "b", b, {"status": "timeout", "stop_condition": "timeout"})
    assert row["truncated"] and not row["training_ready"]


def test_truncation_consumed_cut_step_is_truncated(tmp_path: Path) -> None:
    b = RolloutBuilder("r", "task")
    b.step(assistant("partial"), outcome="incomplete", finish_reason="length")
    row = _export(tmp_path, b)
    # the cut response is the last request's answer: not consumed, so excluded
    assert row["excluded"][0]["reason"] == "incomplete" and not row["steps"]
    b.user("go on")
    b.step(assistant("done"))
    row = _export(tmp_path / "2", b)
    assert row["steps"][0]["truncated"] and not row["training_ready"]


# -- token identity --------------------------------------------------------------------
def test_token_identity(samples: Path) -> None:
    from contagent.layout import find_rollouts
    from contagent.rawlog.read import read_exchanges
    from contagent.wire.chat import sum_usage, usage_counts

    for paths in find_rollouts([samples]):
        row = build_row(paths).row
        usage = row["token_usage"]
        raw = read_exchanges(paths.exchanges)
        by_index = {i: usage_counts(o.get("usage")) for i, o in raw.outcomes.items()}
        # each part equals the raw log's usage summed over the exchanges it names
        assert usage["billed"] == sum_usage(by_index.values())
        assert usage["selected"] == sum_usage(
            by_index.get(s["exchange_index"]) for s in row["steps"]
        )
        assert usage["excluded"] == sum_usage(
            by_index.get(e["exchange_index"]) for e in row["excluded"]
        )
        for field in USAGE_FIELDS:
            assert usage["selected"][field] + usage["excluded"][field] == usage["billed"][field]


# -- reasoning policy ------------------------------------------------------------------
def test_reasoning_kept_or_dropped_never_duplicated() -> None:
    msg = {"role": "assistant", "content": "<think>plan</think>\nanswer"}
    kept = rules.apply_reasoning_policy(msg, drop=False)
    assert kept == {"role": "assistant", "content": "answer", "reasoning_content": "plan"}
    both = {"role": "assistant", "content": "<think>x</think>answer", "reasoning_content": "server"}
    assert rules.apply_reasoning_policy(both, drop=False)["content"] == "answer"
    assert rules.apply_reasoning_policy(both, drop=False)["reasoning_content"] == "server"
    assert "reasoning_content" not in rules.apply_reasoning_policy(both, drop=True)
    assert not rules.has_think_conflict(rules.apply_reasoning_policy(both, drop=False))


def test_reasoning_think_text_the_policy_cannot_move_makes_the_rollout_not_ready(
    tmp_path: Path,
) -> None:
    from contagent.validate.check import validate
    from tests.helpers import write_rows

    b = RolloutBuilder("r", "task")
    b.step(assistant("I wrap plans in <think> tags.", reasoning="server thought"))
    row = _export(tmp_path / "raw", b)
    assert not row["training_ready"] and row["not_ready_kinds"] == ["reasoning_conflict"]
    (tmp_path / "out").mkdir()
    write_rows(tmp_path / "out" / "results.jsonl", [row])
    assert validate(tmp_path / "out" / "results.jsonl").ok  # and the validator agrees
    row["training_ready"], row["not_ready_kinds"], row["training_ready_reason"] = True, [], None
    write_rows(tmp_path / "out" / "results.jsonl", [row])
    report = validate(tmp_path / "out" / "results.jsonl")
    assert any("<think> text" in v.reason for v in report.violations)


def test_fail_closed_exporter_refuses_to_write_a_row_that_loses_an_exchange(
    samples: Path, tmp_path: Path, monkeypatch
) -> None:
    import pytest

    from contagent.errors import ContagentError
    from contagent.export.exporter import export

    real = rules.select

    def lossy(views):  # a selection bug: one exchange vanishes
        decisions, problems = real(views)
        decisions.pop(max(decisions))
        return decisions, problems

    monkeypatch.setattr(rules, "select", lossy)
    with pytest.raises(
        ContagentError, match="refusing to write an export that loses exchanges"
    ) as err:
        export([samples / "clean_pass"], tmp_path / "out")
    assert err.value.exit_code == 3
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_calls_to_unknown_tools_or_with_bad_arguments_are_not_training_ready(
    tmp_path: Path,
) -> None:
    b = RolloutBuilder("r", "task")
    b.step(assistant(None, call("c1", "browser", url="x")))  # not among the request tools
    b.tool_output("c1", "browser", "page")
    bad = {
        "id": "c2",
        "type": "function",
        "function": {"name": "terminal", "arguments": "{not json"},
    }
    b.step(assistant(None, bad))
    row = _export(tmp_path, b)
    assert not row["training_ready"]
    assert row["not_ready_kinds"] == ["bad_tool_arguments", "unknown_tool"]
    assert "'browser'" in row["training_ready_reason"]


def test_tool_calls_on_a_user_message_break_the_protocol() -> None:
    msgs = [{"role": "user", "content": "x", "tool_calls": [{"id": "c1"}]}]
    assert ("tool_protocol", "message 0 (user) carries tool_calls") in tool_protocol_problems(msgs)
