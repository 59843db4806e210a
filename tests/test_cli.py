"""The real CLI end to end: export prints its summary, validate exits 0/1/2 and speaks JSON."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import cli, read_rows, write_rows
from tools.samples import SCENARIOS


def test_export_then_validate(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = cli("export", str(samples), "--out", str(out), "--filter", "all", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    for label in (
        "rollouts read",
        "training-ready",
        "excluded: duplicate_retry",
        "prime-sft: conversation branches",
        "tokens billed",
    ):
        assert label in proc.stderr
    summary = json.loads((out / "export-summary.json").read_text())
    expected = {name: e for name, (_, e) in SCENARIOS.items()}
    assert summary["rollouts_read"] == len(expected)
    assert summary["training_ready"] == sum(e.training_ready for e in expected.values())
    t = summary["tokens"]
    assert (
        t["billed"]["total_tokens"] == t["selected"]["total_tokens"] + t["excluded"]["total_tokens"]
    )

    ok = cli("validate", str(out / "results.jsonl"), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = json.loads(ok.stdout)
    ready = [e for e in expected.values() if e.training_ready]
    assert report["rows"] == len(expected) and report["violations"] == []
    assert report["parquet_rows"] == sum(e.branches for e in ready)

    rows = read_rows(out / "results.jsonl")
    rows[0]["steps"][0]["response"]["content"] = "forged"
    write_rows(out / "results.jsonl", rows)
    bad = cli("validate", str(out / "results.jsonl"))
    assert bad.returncode == 1
    assert f"violation {rows[0]['rollout_id']}: step" in bad.stderr
    assert "Traceback" not in bad.stderr
    report = json.loads(cli("validate", str(out / "results.jsonl"), "--json").stdout)
    assert report["violations"][0]["rollout_id"] == rows[0]["rollout_id"]


def test_validate_says_a_problem_of_the_whole_export_as_a_sentence_on_one_line(
    samples: Path, tmp_path: Path
) -> None:
    """A folder-level problem names no rollout, and no line is wrapped at the 80 columns a
    console assumes when it writes to a pipe."""
    import shutil

    out = tmp_path / ("a-long-folder-name-so-that-the-lines-pass-eighty-columns" * 2)
    formats = ("--format", "prime-sft", "--format", "atif")
    cli("export", str(samples), "--out", str(out), *formats, check=True)
    shutil.rmtree(out / "prime-sft")
    proc = cli("validate", str(out / "results.jsonl"), env={"COLUMNS": None})
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines == [
        "violation in the export: prime-sft/: the export wrote this format but the folder is gone",
        lines[-1],
    ]
    assert lines[-1].startswith("validated ") and lines[-1].endswith("): 1 violation(s)")


def test_validate_prints_what_the_export_holds_as_text_not_markup() -> None:
    from types import SimpleNamespace

    from contagent.cli._common import console
    from contagent.cli.export_cmd import _print_report

    violation = SimpleNamespace(rollout_id="exp[1]__a", reason="step 2: [bold]x[/bold] changed")
    report = SimpleNamespace(
        violations=[violation], ok=False, rows=1, training_ready=0, parquet_rows=0, documents=0
    )
    with console.capture() as captured:
        _print_report(report)
    assert captured.get().splitlines()[0] == ("violation exp[1]__a: step 2: [bold]x[/bold] changed")


def test_validate_notices_a_changed_raw_log(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cli("export", str(samples), "--out", str(out), check=True)
    log = samples / "clean_pass" / "exchanges.jsonl"
    log.write_bytes(log.read_bytes() + b"\n")
    proc = cli("validate", str(out / "results.jsonl"))
    assert proc.returncode == 1
    assert "raw log changed since export" in proc.stderr


def test_single_rollout_directory_is_accepted(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cli("export", str(samples / "clean_pass"), "--out", str(out), check=True)
    assert [r["rollout_id"] for r in read_rows(out / "results.jsonl")] == ["clean_pass"]
