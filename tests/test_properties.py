"""Generated rollouts: every export validates; every single mutation of a valid output is caught."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contagent import rules
from contagent.exporters.export import ExportOptions, export
from contagent.testing.rollouts import RolloutBuilder, assistant, call
from contagent.validate.check import validate
from tests.conftest import read_rows, write_rows

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
        c = next_call()
        message = assistant("<think>hmm</think>ok" if action == "reasoning" else None, c)
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
        assert (inc.repaired, inc.repairs, inc.ids, inc.texts, inc.pending, inc.problems) == (
            full.repaired,
            full.repairs,
            full.ids,
            full.texts,
            full.pending,
            full.problems,
        )
        prev = inc
