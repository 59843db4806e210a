"""The tokens format: samples cut from raw logs with token data in vLLM's shapes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.export.formats.tokens_format import TOKENS_SCHEMA
from contagent.rawlog.read import read_exchanges
from contagent.rules import sampling
from contagent.rules import token_samples as rules
from tests.helpers import REPO, read_rows
from tools.token_rollouts import IM_END
from tools.token_samples import TOKEN_SCENARIOS, build_token_rollouts


@pytest.fixture
def token_runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    build_token_rollouts(root)
    return root


def _export(runs: Path, out: Path, **options: Any) -> tuple[dict[str, dict], list[dict]]:
    options.setdefault("formats", ("tokens",))
    options.setdefault("filter", "all")
    export([runs], out, ExportOptions(**options))
    rows = {r["rollout_id"]: r for r in read_rows(out / "results.jsonl")}
    folder = out / "tokens" / "data"
    records = pq.read_table(folder).to_pylist() if folder.exists() else []
    return rows, records


def _raw_steps(runs: Path, rid: str) -> dict[int, tuple[list[int], list[int], list[float]]]:
    """Per exchange: (prompt ids, sampled ids, logprobs) as the raw log holds them."""
    raw = read_exchanges(runs / rid / "exchanges.jsonl")
    out = {}
    for i, outcome in raw.outcomes.items():
        tokens = outcome.get("tokens")
        if tokens and tokens["choices"]:
            choice = tokens["choices"][0]
            out[i] = (tokens["prompt_token_ids"], choice["token_ids"], choice["logprobs"])
    return out


def _f32(values: list[float]) -> list[float]:
    from array import array

    return array("f", values).tolist()


def _of(records: list[dict], rid: str) -> list[dict]:
    return sorted(
        (r for r in records if r["rollout_id"] == rid), key=lambda r: (r["branch"], r["sample"])
    )


def test_each_scenario_gives_its_samples_breaks_and_kinds(token_runs: Path, tmp_path: Path) -> None:
    rows, records = _export(token_runs, tmp_path / "out")
    assert pq.read_schema(next((tmp_path / "out/tokens/data").glob("*.parquet"))).equals(
        TOKENS_SCHEMA, check_metadata=False
    )
    for name, (_, want) in TOKEN_SCENARIOS.items():
        section = rows[name]["tokens"]
        assert section["samples"] == list(want.samples), name
        assert [b["exchange_index"] for b in section["breaks"]] == list(want.breaks), name
        assert section["kinds"] == list(want.kinds), name
        assert bool(section["reason"]) == bool(want.kinds), name
        # token kinds never make a rollout not training-ready: the SFT formats are unaffected
        assert not set(want.kinds) & set(rows[name]["not_ready_kinds"]), name
        mine = _of(records, name)
        assert len(mine) == (sum(want.samples) if want.written else 0), name
        for rec in mine:
            n = rec["num_tokens"]
            assert n == len(rec["token_ids"]) == len(rec["mask"]) == len(rec["logprobs"])
            assert n == len(rec["temperatures"]) == len(rec["constrained"])
            assert rec["num_sampled"] == sum(rec["mask"])


def test_a_sample_spans_steps_whose_prompts_extend_the_tokens_before(
    token_runs: Path, tmp_path: Path
) -> None:
    _, records = _export(token_runs, tmp_path / "out")
    (rec,) = _of(records, "prefix_kept")
    steps = _raw_steps(token_runs, "prefix_kept")
    prompt, sampled, _ = steps[max(steps)]
    assert rec["token_ids"] == prompt + sampled  # the server's tokens, nothing re-tokenized
    assert rec["num_steps"] == 3
    mask = [False] * len(rec["token_ids"])
    logprobs = [0.0] * len(mask)
    for p, s, lp in steps.values():
        assert rec["token_ids"][len(p) : len(p) + len(s)] == s
        mask[len(p) : len(p) + len(s)] = [True] * len(s)
        logprobs[len(p) : len(p) + len(s)] = lp
    assert rec["mask"] == mask
    assert rec["logprobs"] == _f32(logprobs)
    assert rec["temperatures"] == _f32([0.7] * len(mask))
    assert not any(rec["constrained"])


def test_where_the_prefix_breaks_a_new_sample_starts_with_the_full_prompt(
    token_runs: Path, tmp_path: Path
) -> None:
    rows, records = _export(token_runs, tmp_path / "out")
    steps = _raw_steps(token_runs, "qwen3_breaks")
    mine = _of(records, "qwen3_breaks")
    for rec, (prompt, sampled, logprobs) in zip(mine, steps.values(), strict=True):
        assert rec["token_ids"] == prompt + sampled
        assert rec["mask"] == [False] * len(prompt) + [True] * len(sampled)
        assert rec["logprobs"][len(prompt) :] == _f32(logprobs)
        assert rec["num_steps"] == 1
        # no temperature in the request: the server's default, as recorded
        assert rec["temperatures"] == [1.0] * len(rec["token_ids"])
    for brk in rows["qwen3_breaks"]["tokens"]["breaks"]:
        before_prompt, before_sampled, _ = steps[brk["exchange_index"] - 1]
        expected = before_prompt + before_sampled
        prompt = steps[brk["exchange_index"]][0]
        pos = brk["position"]
        assert prompt[:pos] == expected[:pos] and prompt[pos] != expected[pos]


def test_a_fork_starts_with_the_shared_steps_trained_once(token_runs: Path, tmp_path: Path) -> None:
    _, records = _export(token_runs, tmp_path / "out")
    main, side = _of(records, "forked")
    steps = _raw_steps(token_runs, "forked")
    (p0, s0, _), (p1, s1, lp1) = steps[0], steps[1]
    assert (main["branch"], side["branch"]) == (0, 1)
    assert side["token_ids"] == p1 + s1
    assert side["token_ids"][: len(p0) + len(s0)] == p0 + s0  # the shared step as context
    assert side["mask"] == [False] * len(p1) + [True] * len(s1)  # trained in branch 0
    assert side["logprobs"][len(p1) :] == _f32(lp1)
    assert side["num_steps"] == 1
    assert main["mask"][len(p0) : len(p0) + len(s0)] == [True] * len(s0)
    assert main["num_steps"] == 3


def test_a_fork_whose_prompt_breaks_at_the_fork_starts_with_its_own_prompt() -> None:
    def step(index: int, branch: int, parent: int | None, prompt: list[int]) -> Any:
        return rules.StepTokens(index, branch, parent, prompt, [9, IM_END], [-1.0, -0.5], 1.0)

    plan = rules.plan_samples(
        [step(0, 0, None, [1, 2]), step(1, 1, 0, [1, 2, 7]), step(2, 0, 0, [1, 2, 9, IM_END, 4])],
        2,
    )
    assert plan.counts == (1, 1)
    assert plan.breaks == ({"exchange_index": 1, "branch": 1, "position": 2},)
    side = next(s for s in plan.samples if s.branch == 1)
    assert [s.index for s in side.steps] == [1]
    assert rules.sample_tokens(side).token_ids == [1, 2, 7, 9, IM_END]


def test_truncated_rollouts_give_samples_marked_truncated(token_runs: Path, tmp_path: Path) -> None:
    rows, records = _export(token_runs, tmp_path / "out")
    assert rows["cut_by_limit"]["not_ready_kinds"] == ["truncated"]
    assert [r["truncated"] for r in _of(records, "cut_by_limit")] == [True]
    assert not any(r["truncated"] for r in records if r["rollout_id"] != "cut_by_limit")


@pytest.mark.parametrize(
    ("ready", "kinds", "tokens", "passed", "rollout_filter", "selected"),
    [
        (True, [], {"kinds": []}, True, "passed", True),
        (True, [], {"kinds": []}, False, "passed", False),
        (True, [], {"kinds": []}, False, "all", True),
        (False, ["truncated"], {"kinds": []}, False, "all", True),
        (False, ["missing_usage", "truncated"], {"kinds": []}, True, "all", False),
        (False, ["partial_execution"], {"kinds": []}, True, "all", False),
        (True, [], {"kinds": ["no_tokens"]}, True, "all", False),
        (True, [], None, True, "all", False),
    ],
)
def test_which_rollouts_give_samples(
    ready: bool, kinds: list[str], tokens: Any, passed: bool, rollout_filter: str, selected: bool
) -> None:
    row = {"training_ready": ready, "not_ready_kinds": kinds, "tokens": tokens, "passed": passed}
    assert rules.selected_for_tokens(row, rollout_filter) is selected


def test_filter_passed_leaves_failed_rollouts_out(token_runs: Path, tmp_path: Path) -> None:
    _, records = _export(token_runs, tmp_path / "out", filter="passed")
    ids = {r["rollout_id"] for r in records}
    assert "failed_tokens" not in ids and "cut_by_limit" not in ids and "prefix_kept" in ids


def test_constrained_steps_are_marked_on_their_sampled_tokens(
    token_runs: Path, tmp_path: Path
) -> None:
    _, records = _export(token_runs, tmp_path / "out")
    (rec,) = _of(records, "constrained_step")
    steps = _raw_steps(token_runs, "constrained_step")
    prompt, sampled, _ = steps[0]  # the step under tool_choice: required
    marks = [False] * len(rec["token_ids"])
    marks[len(prompt) : len(prompt) + len(sampled)] = [True] * len(sampled)
    assert rec["constrained"] == marks


_STRICT = [{"type": "function", "function": {"name": "t", "strict": True}}]


@pytest.mark.parametrize(
    ("extra", "mode", "expected"),
    [
        ({"tool_choice": "required"}, "processed_logprobs", "step"),
        ({"tool_choice": {"type": "function", "function": {"name": "t"}}}, None, "step"),
        ({"tool_choice": "auto"}, None, "none"),
        ({"tool_choice": "none"}, None, "none"),
        ({"tools": _STRICT}, None, "tool_call"),
        ({"tools": _STRICT, "tool_choice": "auto"}, None, "tool_call"),
        ({"tools": _STRICT, "tool_choice": "required"}, None, "step"),
        (
            {"tools": [{"type": "function", "function": {"name": "t", "strict": False}}]},
            None,
            "none",
        ),
        ({"tools": [{"type": "function", "strict": True, "name": "t"}]}, None, "tool_call"),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, None, "step"),
        ({"response_format": {"type": "json_object"}}, None, "step"),
        ({"response_format": {"type": "text"}}, None, "none"),
        ({"structured_outputs": {"regex": "a+"}}, None, "step"),
        ({"guided_json": {"type": "object"}}, None, "none"),  # vLLM 0.32 ignores guided_*
        ({"guided_choice": ["a", "b"]}, None, "none"),
        ({"logit_bias": {"5": 3.0}}, "processed_logprobs", "step"),
        ({"logit_bias": {"5": 3.0}}, None, "step"),
        ({"logit_bias": {"5": 3.0}}, "raw_logprobs", "none"),  # raw reports the model's own
        ({}, None, "none"),
    ],
)
def test_constraint_detection(extra: dict[str, Any], mode: str | None, expected: str) -> None:
    body = {"messages": [], **extra}
    request = {"body": body, "server": {"name": "vllm", "logprobs_mode": mode}}
    assert sampling.constraint(body, sampling.step_sampling(request)) == expected


def _step(path: str = "/v1/chat/completions", **tokens: Any) -> Any:
    data = {
        "prompt_token_ids": [1, 2, 3],
        "choices": [{"index": 0, "token_ids": [4, 5], "logprobs": [-0.1, -0.2]}],
    }
    data.update(tokens)
    step = {"exchange_index": 3, "branch": 0, "extends": None}
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    return rules.step_tokens(step, {"path": path, "body": {}}, {"tokens": data}, usage)


@pytest.mark.parametrize(
    ("record", "kind"),
    [
        (_step("/v1/responses"), "no_tokens"),
        (_step("/v1/messages"), "no_tokens"),
        (_step(prompt_token_ids=None), "no_tokens"),
        (_step(choices=[]), "no_tokens"),
        (_step(choices=[{"index": 0, "token_ids": [4, 5], "logprobs": None}]), "no_logprobs"),
        (_step(choices=[{"index": 0, "token_ids": [4, 5], "logprobs": [-0.1]}]), "token_mismatch"),
        (_step(prompt_token_ids=[1, 2]), "token_mismatch"),  # usage counted 3 prompt tokens
        (_step(choices=[{"index": 0, "token_ids": [4], "logprobs": [-0.1]}]), "token_mismatch"),
        (_step(prompt_token_ids=[1, "2", 3]), "bad_tokens"),
        (_step(prompt_token_ids=[1, -2, 3]), "bad_tokens"),
        (_step(choices=[{"index": 0, "token_ids": [4, 5], "logprobs": [-0.1, "x"]}]), "bad_tokens"),
    ],
)
def test_unsound_token_data_has_a_typed_kind(record: Any, kind: str) -> None:
    assert isinstance(record, tuple) and record[0] == kind and "step 3" in record[1]


def test_sound_token_data_reads() -> None:
    step = _step()
    assert isinstance(step, rules.StepTokens)
    assert (step.prompt, step.sampled, step.logprobs) == ([1, 2, 3], [4, 5], [-0.1, -0.2])


def test_a_responses_step_is_no_tokens_in_the_row(tmp_path: Path) -> None:
    """The Responses route returns no token ids: the rollout gives no samples, SFT unaffected."""
    src = REPO / "data" / "rollouts" / "responses" / "responses_clean_pass"
    log = tmp_path / "runs" / src.name / "exchanges.jsonl"
    shutil.copytree(src, log.parent)
    lines = log.read_bytes().splitlines()
    spoilt = []
    for line in lines:
        rec = orjson.loads(line)
        if rec.get("type") == "outcome":
            rec["tokens"] = {"prompt_token_ids": [1], "choices": [{"index": 0, "token_ids": [2]}]}
        spoilt.append(orjson.dumps(rec))
    log.write_bytes(b"\n".join(spoilt) + b"\n")
    rows, records = _export(tmp_path / "runs", tmp_path / "out")
    (row,) = rows.values()
    assert "no_tokens" in row["tokens"]["kinds"] and not records


def test_drop_reasoning_does_not_change_token_samples(token_runs: Path, tmp_path: Path) -> None:
    rows, records = _export(token_runs, tmp_path / "kept")
    dropped_rows, dropped = _export(token_runs, tmp_path / "dropped", drop_reasoning=True)
    assert orjson.dumps(dropped, option=orjson.OPT_SERIALIZE_NUMPY) == orjson.dumps(records)
    assert {k: r["tokens"] for k, r in rows.items()} == {
        k: r["tokens"] for k, r in dropped_rows.items()
    }


def test_rows_carry_the_tokens_section_whatever_the_format(
    token_runs: Path, tmp_path: Path
) -> None:
    with_tokens, _ = _export(token_runs, tmp_path / "a")
    for formats in ((), ("prime-sft",)):
        rows, _ = _export(token_runs, tmp_path / f"b{len(formats)}", formats=formats)
        assert {k: r["tokens"] for k, r in rows.items()} == {
            k: r["tokens"] for k, r in with_tokens.items()
        }
        assert not (tmp_path / f"b{len(formats)}" / "tokens").exists()


def test_a_raw_log_without_token_data_has_no_tokens_section(samples: Path, tmp_path: Path) -> None:
    rows, records = _export(samples, tmp_path / "out")
    assert all(r["tokens"] is None for r in rows.values()) and not records


def test_the_summary_counts_breaks_kinds_and_rows(token_runs: Path, tmp_path: Path) -> None:
    summary = export(
        [token_runs], tmp_path / "out", ExportOptions(formats=("tokens", "prime-sft"), filter="all")
    )
    expected = [e for _, e in TOKEN_SCENARIOS.values()]
    assert summary.token_samples.rollouts == len(expected)
    assert summary.token_samples.prefix_breaks == sum(len(e.breaks) for e in expected)
    assert summary.token_samples.kinds == {k: 1 for e in expected for k in e.kinds}
    assert summary.format_rows["tokens"] == sum(sum(e.samples) for e in expected if e.written)
    assert summary.format_rows["prime-sft"] == summary.branches_written
    on_disk = orjson.loads((tmp_path / "out" / "export-summary.json").read_bytes())
    assert on_disk["token_samples"]["prefix_breaks"] == summary.token_samples.prefix_breaks


def test_the_folder_loads_with_datasets(token_runs: Path, tmp_path: Path) -> None:
    import datasets

    _, records = _export(token_runs, tmp_path / "out")
    ds = datasets.load_dataset(str(tmp_path / "out" / "tokens"), split="train")
    assert len(ds) == len(records)
    assert ds.features["token_ids"].feature.dtype == "int32"
    assert ds.features["logprobs"].feature.dtype == "float32"
    first = ds[0]
    assert len(first["token_ids"]) == len(first["mask"]) == first["num_tokens"]
    card = (tmp_path / "out" / "tokens" / "README.md").read_text()
    assert "TrainingSample" in card and "constrained" in card and "Rows (token samples)" in card
    assert "Supervised fine-tuning" not in card


def test_builder_records_fit_the_raw_log_models(token_runs: Path) -> None:
    from contagent.rawlog.records import OutcomeRecord, RequestRecord

    if "sampling" not in RequestRecord.model_fields:
        pytest.skip("these raw-log models predate the recorded sampling")
    for log in token_runs.glob("*/exchanges.jsonl"):
        for line in log.read_bytes().splitlines():
            rec = orjson.loads(line)
            (RequestRecord if rec["type"] == "request" else OutcomeRecord).model_validate(rec)


def test_the_cli_exports_tokens_with_jobs_and_validates(token_runs: Path, tmp_path: Path) -> None:
    from tests.helpers import cli

    out = tmp_path / "out"
    args = ("--format", "tokens", "--format", "prime-sft", "--filter", "all", "--jobs", "2")
    proc = cli("export", str(token_runs), "--out", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    for label in ("tokens: token samples", "prefix breaks", "no token samples: no_tokens"):
        assert label in proc.stderr
    ok = cli("validate", str(out / "results.jsonl"))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_row_of_an_older_version_reads_without_a_tokens_section(
    token_runs: Path, tmp_path: Path
) -> None:
    from contagent.core.rows import SINCE_VERSION, parse_line

    rows, _ = _export(token_runs, tmp_path / "out")
    row = {k: v for k, v in rows["prefix_kept"].items() if k != "tokens"}
    older = parse_line(orjson.dumps({**row, "schema_version": SINCE_VERSION["tokens"] - 1}))
    assert older.problem is None and older.row is not None
    current = parse_line(orjson.dumps(row))
    assert current.problem == "missing keys: tokens"
