"""Bad input: a clear one-line error and a non-zero exit, never a traceback, never data loss."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contagent.errors import ContagentError
from contagent.rawlog.read import parse_exchanges
from tests.helpers import cli, read_rows


def assert_one_line_error(proc, needle: str, code: int = 2) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("contagent: error:"), proc.stderr
    assert needle in lines[0]


def test_missing_directory(tmp_path: Path) -> None:
    proc = cli("export", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "no such directory")


def test_folder_without_rollouts(tmp_path: Path) -> None:
    proc = cli("export", str(tmp_path), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "no rollout")


def test_malformed_line_names_file_and_line(samples: Path, tmp_path: Path) -> None:
    log = samples / "clean_pass" / "exchanges.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    lines[2] = b'{"type": "request", oops}\n'
    log.write_bytes(b"".join(lines))
    out = tmp_path / "out"
    proc = cli("export", str(samples), "--out", str(out))
    assert_one_line_error(proc, f"{log}:3: malformed JSON")
    assert not (out / "results.jsonl").exists()  # nothing half-written under the final name


def test_torn_last_line_makes_the_rollout_not_ready(samples: Path, tmp_path: Path) -> None:
    log = samples / "clean_pass" / "exchanges.jsonl"
    log.write_bytes(log.read_bytes()[:-40])
    out = tmp_path / "out"
    cli("export", str(samples), "--out", str(out), "--filter", "all", check=True)
    row = next(r for r in read_rows(out / "results.jsonl") if r["rollout_id"] == "clean_pass")
    assert "torn_line" in row["not_ready_kinds"] and not row["training_ready"]
    assert cli("validate", str(out / "results.jsonl")).returncode == 0


def test_torn_line_fenced_by_a_proxy_restart_is_read(samples: Path, tmp_path: Path) -> None:
    """The proxy ends a torn line with a newline on restart and appends after it."""
    log = samples / "clean_pass" / "exchanges.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    torn = lines[-1][: len(lines[-1]) // 2] + b"\n"
    log.write_bytes(b"".join(lines[:-1]) + torn + lines[-1])
    out = tmp_path / "out"
    cli("export", str(samples), "--out", str(out), "--filter", "all", check=True)
    row = next(r for r in read_rows(out / "results.jsonl") if r["rollout_id"] == "clean_pass")
    assert row["not_ready_kinds"] == ["torn_line"], row["training_ready_reason"]
    assert f"line {len(lines)} is torn" in row["training_ready_reason"]
    assert cli("validate", str(out / "results.jsonl")).returncode == 0


def test_failed_export_keeps_previous_results(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cli("export", str(samples), "--out", str(out), check=True)
    before = (out / "results.jsonl").read_bytes()
    (samples / "clean_pass" / "exchanges.jsonl").write_bytes(b"[1]\n")
    proc = cli("export", str(samples), "--out", str(out))
    assert_one_line_error(proc, "not a JSON object")
    assert (out / "results.jsonl").read_bytes() == before


def test_malformed_result_json(samples: Path, tmp_path: Path) -> None:
    (samples / "clean_pass" / "result.json").write_text("{nope")
    proc = cli("export", str(samples), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "result.json: malformed JSON")


def test_unknown_options(samples: Path, tmp_path: Path) -> None:
    assert_one_line_error(
        cli("export", str(samples), "--out", str(tmp_path), "--format", "csv"), "--format"
    )
    assert_one_line_error(
        cli("export", str(samples), "--out", str(tmp_path), "--filter", "x"), "--filter"
    )
    assert_one_line_error(
        cli("export", str(samples), "--out", str(tmp_path), "--jobs", "0"), "--jobs"
    )
    for license in ("Apache 2.0", "other"):
        proc = cli("export", str(samples), "--out", str(tmp_path / "o"), "--license", license)
        assert_one_line_error(proc, "--license")
        assert license in proc.stderr
        assert not (tmp_path / "o").exists()  # refused before anything is written


def test_validate_missing_and_garbage(tmp_path: Path) -> None:
    assert_one_line_error(cli("validate", str(tmp_path / "results.jsonl")), "no such file")
    bad = tmp_path / "results.jsonl"
    bad.write_text('{"rollout_id": "x"}\n')
    proc = cli("validate", str(bad))
    assert proc.returncode == 1 and "row at line 1 is malformed: missing keys" in proc.stderr
    bad.write_text("not json\n")
    proc = cli("validate", str(bad))
    assert (
        proc.returncode == 1
        and "row at line 1 is malformed: not JSON (invalid literal" in proc.stderr
    )
    assert "Traceback" not in proc.stderr


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.binary(max_size=400)
    | st.lists(
        st.from_regex(rb'\{"type": ?"(request|outcome)".*\}\n', fullmatch=True), max_size=5
    ).map(b"".join)
)
def test_raw_log_reader_raises_only_its_own_error(data: bytes) -> None:
    try:
        raw = parse_exchanges(Path("x.jsonl"), data)
    except ContagentError as exc:
        assert "\n" not in str(exc)
    else:
        assert set(raw.requests) | set(raw.outcomes) == set(raw.indices)


@pytest.mark.parametrize(
    "record",
    [
        b'{"type":"request","index":-1,"method":"POST","path":"/"}',
        b'{"type":"request","index":true,"method":"POST","path":"/"}',
        b'{"type":"outcome","index":0,"outcome":"great"}',
        b'{"type":"request","method":"POST","path":"/"}',
        b'{"type":"reply","index":0}',
    ],
)
def test_raw_log_reader_rejects_bad_records(record: bytes) -> None:
    with pytest.raises(ContagentError, match=r"x.jsonl:1: "):
        parse_exchanges(Path("x.jsonl"), record + b"\n")
