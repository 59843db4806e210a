"""Generated rollouts: every export validates; every single mutation of a valid output is caught."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contagent import rules
from contagent.export.exporter import ExportOptions, export
from contagent.validate.check import validate
from tests.helpers import read_rows, write_rows
from tools.rollouts import RolloutBuilder, assistant, call

ACTIONS = st.sampled_from(
    [
        "tool",
        "tool",
        "fragments",
        "abandon_retry",
        "double_completed",
        "length_retry",
        "http_error",
        "moved_on",
        "upstream_error",
        "reasoning",
        "parallel",
        "side_call",
        "reasoning_alias",
        "partial",
    ]
)
ENDINGS = st.sampled_from(["finish", "text", "crash", "none"])


def build(rollout_id: str, actions: list[str], ending: str, root: Path) -> None:
    b = RolloutBuilder(rollout_id, "Solve the task.")
    n = 0

    def next_call() -> dict[str, Any]:
        nonlocal n
        n += 1
        return call(f"call_{n}", "terminal", command=f"echo {n}")

    for action in actions:
        if action == "abandon_retry":
            i = b.request()
            b.outcome(i, "abandoned", status=None, usage=False, error="client went away")
        elif action == "double_completed":
            i = b.request()
            b.outcome(i, "completed", message=assistant(None, next_call()))
        elif action == "length_retry":
            i = b.request()
            b.outcome(i, "incomplete", message=assistant("cut"), finish_reason="length")
        elif action in ("http_error", "upstream_error"):
            i = b.request()
            b.outcome(
                i,
                action,
                status=503 if action == "http_error" else None,
                usage=False,
                response={"error": "busy"} if action == "http_error" else None,
            )
        elif action == "moved_on":
            b.step(assistant(None, next_call()), consume=False)
            b.user("continue")
            continue
        elif action in ("parallel", "partial"):
            c1, c2 = next_call(), next_call()
            b.step(assistant(None, c1, c2), consume=action == "parallel")
            if action == "partial":
                b.replay(assistant(None, c1))
            else:
                b.tool_output(c2["id"], "terminal", "second")
            b.tool_output(c1["id"], "terminal", "first")
            continue
        elif action == "side_call":
            main = list(b.messages)
            b.user("Critic: on track?")
            b.step(assistant("yes"), consume=False)
            b.messages = main
            continue
        c = next_call()
        message = assistant("<think>hmm</think>ok" if action == "reasoning" else None, c)
        if action == "reasoning_alias":
            message["reasoning"] = "thinking"
        b.step(message)
        b.tool_output(
            c["id"],
            "terminal",
            f"line one\nline two {n}",
            fragments=2 if action == "fragments" else 1,
        )
    if ending == "finish":
        b.step(assistant(None, call("call_end", "finish", message="done")))
    elif ending == "text":
        b.step(assistant("All done."))
    elif ending == "crash":
        b.request()
    b.write(
        root,
        {"passed": True, "experiment": "gen", "status": "passed", "stop_condition": "finished"},
    )


def mutations(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Single edits of a valid row, each of which the validator must catch."""
    out: list[tuple[str, dict[str, Any]]] = []

    def edit(name: str, fn: Any) -> None:
        new = copy.deepcopy(row)
        if fn(new) is not False:
            out.append((name, new))

    steps, excluded = row["steps"], row["excluded"]
    if steps:
        edit("drop a step", lambda r: r["steps"].pop())
        edit("duplicate a step", lambda r: r["steps"].append(copy.deepcopy(r["steps"][-1])))
        edit("edit a message", lambda r: r["steps"][0]["messages"][-1].update(content="forged"))
        edit("edit a response", lambda r: r["steps"][-1]["response"].update(content="forged"))
        edit(
            "flip step truncated",
            lambda r: r["steps"][-1].update(truncated=not r["steps"][-1]["truncated"]),
        )
        edit(
            "flip consumed", lambda r: r["steps"][0].update(consumed=not r["steps"][0]["consumed"])
        )
        edit(
            "change step usage",
            lambda r: (
                r["steps"][0]["usage"]
                and r["steps"][0]["usage"].update(
                    prompt_tokens=r["steps"][0]["usage"]["prompt_tokens"] + 1
                )
            ),
        )
        edit(
            "renumber a step",
            lambda r: r["steps"][-1].update(exchange_index=r["steps"][-1]["exchange_index"] + 100),
        )
        edit("drop a tool", lambda r: r["tools"].pop())
    if len(steps) > 1:
        edit(
            "break extends",
            lambda r: r["steps"][1].update(
                extends=None
                if r["steps"][1]["extends"] is not None
                else r["steps"][0]["exchange_index"]
            ),
        )
    if excluded:
        edit("drop an exclusion", lambda r: r["excluded"].pop())
        edit(
            "relabel an exclusion",
            lambda r: r["excluded"][0].update(
                reason="abandoned" if r["excluded"][0]["reason"] != "abandoned" else "http_error"
            ),
        )
    edit("flip training_ready", lambda r: r.update(training_ready=not r["training_ready"]))
    edit("flip row truncated", lambda r: r.update(truncated=not r["truncated"]))
    edit(
        "change billed tokens",
        lambda r: r["token_usage"]["billed"].update(
            total_tokens=r["token_usage"]["billed"]["total_tokens"] + 1
        ),
    )
    edit(
        "change excluded tokens",
        lambda r: r["token_usage"]["excluded"].update(
            prompt_tokens=r["token_usage"]["excluded"]["prompt_tokens"] + 1
        ),
    )
    edit("change checksum", lambda r: r["raw_log"].update(sha256="0" * 64))
    edit("flip passed", lambda r: r.update(passed=not r["passed"]))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rollouts=st.lists(st.tuples(st.lists(ACTIONS, max_size=6), ENDINGS), min_size=1, max_size=3),
    drop_reasoning=st.booleans(),
)
def test_every_export_validates_and_every_mutation_is_caught(
    rollouts: list, drop_reasoning: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        for n, (actions, ending) in enumerate(rollouts):
            build(f"gen-{n}", actions, ending, root)
        out = Path(tmp) / "out"
        export([root], out, ExportOptions(filter="all", drop_reasoning=drop_reasoning))
        report = validate(out / "results.jsonl")
        assert report.ok, report.violations
        rows = read_rows(out / "results.jsonl")
        results = out / "results.jsonl"
        pristine = results.read_bytes()
        for position, row in enumerate(rows):
            for name, mutated in mutations(row):
                write_rows(results, rows[:position] + [mutated] + rows[position + 1 :])
                report = validate(results)
                assert not report.ok, f"mutation not caught: {name}"
        results.write_bytes(pristine)
        assert validate(results).ok


def _leaves(value: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every (path, value) of a JSON value: the containers themselves and each leaf."""
    out: list[tuple[tuple, Any]] = [(path, value)]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _leaves(item, (*path, key))
    elif isinstance(value, list):
        for pos, item in enumerate(value):
            out += _leaves(item, (*path, pos))
    return out


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return "x"
    if isinstance(value, list):
        return value[:-1] if value else [{"forged": 1}]
    return {**value, "forged": 1}


def _set(row: dict[str, Any], path: tuple, value: Any) -> None:
    target: Any = row
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def test_a_change_to_any_field_of_any_row_is_caught(samples: Path, tmp_path: Path) -> None:
    """Each field of a results row (every key at every depth, one row per field shape) is
    re-derived from the raw log: changing it, removing a list entry or adding a key is a
    violation, never a traceback and never healthy."""
    from contagent.errors import ContagentError

    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all"))
    results = out / "results.jsonl"
    rows = read_rows(results)
    shapes: dict[tuple, tuple[int, tuple]] = {}
    for position, row in enumerate(rows):
        for path, _ in _leaves(row):
            shape = tuple("[]" if isinstance(k, int) else k for k in path)
            if path and shape not in shapes:
                shapes[shape] = (position, path)
    assert len(shapes) > 80  # the samples reach every kind of field
    missed = []
    for shape, (position, path) in shapes.items():
        mutated = copy.deepcopy(rows[position])
        target = mutated
        for key in path[:-1]:
            target = target[key]
        _set(mutated, path, _changed(target[path[-1]]))
        write_rows(results, rows[:position] + [mutated] + rows[position + 1 :])
        try:
            caught = not validate(results).ok
        except ContagentError as exc:
            caught = exc.exit_code == 2  # a newer schema_version is refused in one line
        if not caught:
            missed.append(shape)
    assert not missed, f"field changes not caught: {missed}"


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: r.update(raw_log="x"),
        lambda r: r.update(steps=[1]),
        lambda r: r.pop("excluded"),
        lambda r: r["steps"][0].pop("branch"),
        lambda r: r["steps"][0].update(exchange_index="0"),
        lambda r: r.update(token_usage=[]),
        lambda r: r.update(forged=1),
    ],
)
def test_a_malformed_row_is_a_violation_not_a_traceback(
    samples: Path, tmp_path: Path, edit
) -> None:
    out = tmp_path / "out"
    export([samples / "clean_pass"], out, ExportOptions(filter="all"))
    rows = read_rows(out / "results.jsonl")
    edit(rows[0])
    write_rows(out / "results.jsonl", rows)
    report = validate(out / "results.jsonl")
    assert report.violations and all(v.reason for v in report.violations)


def test_one_row_per_rollout_read(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all"))
    results = out / "results.jsonl"
    rows = read_rows(results)
    write_rows(results, rows[1:])
    assert any("no row for the rollout" in v.reason for v in validate(results).violations)
    write_rows(results, rows + rows[:1])
    assert any("rows for one rollout" in v.reason for v in validate(results).violations)
    write_rows(results, rows)
    assert validate(results).ok


MESSAGE = st.one_of(
    st.builds(lambda i: assistant(None, call(f"c{i}", "terminal", command="x")), st.integers(0, 3)),
    st.builds(lambda t: assistant(t), st.sampled_from(["a", "b"])),
    st.builds(
        lambda i, t: {"role": "tool", "tool_call_id": f"c{i}", "content": t},
        st.integers(0, 3),
        st.sampled_from(["o", "p"]),
    ),
    st.builds(lambda t: {"role": "user", "content": t}, st.sampled_from(["u", "v"])),
    st.just({"role": "user", "content": "x", "tool_calls": [{"id": "bad"}]}),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(MESSAGE, max_size=4), st.booleans()), max_size=6))
def test_incremental_scan_equals_scan_from_scratch(growth: list) -> None:
    """The exporter's incremental scan gives exactly what a scan from scratch gives."""

    history: list[dict] = [{"role": "system", "content": "s"}]
    prev = None
    for added, rewrite in growth:
        history = ([history[0]] if rewrite else history) + added
        messages = orjson.loads(orjson.dumps(history))  # fresh objects, as parsed from the log
        inc = rules.scan_request(messages, prev)
        full = rules.scan_request(messages, None)
        assert (inc.repaired, inc.repairs, inc.calls, inc.texts, inc.pending, inc.problems) == (
            full.repaired,
            full.repairs,
            full.calls,
            full.texts,
            full.pending,
            full.problems,
        )
        prev = inc
