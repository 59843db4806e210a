"""Every reader takes a raw log in either form, identically, and bounded by one limit."""

from __future__ import annotations

import hashlib
import io
import random
import re
import shutil
import tracemalloc
from pathlib import Path

import orjson
import pytest
import zstandard

from contagent.errors import ContagentError
from contagent.export.exporter import ExportOptions, export
from contagent.layout import RolloutPaths, RunPaths
from contagent.rawlog.compact import compact_dirs, compact_rollout, compression_parameters
from contagent.rawlog.read import read_exchanges
from contagent.rawlog.result import RolloutResult
from contagent.rawlog.stream import CorruptLog, read_log_bytes
from contagent.runner.executors.transfer import land, pack
from contagent.runner.lifecycle.rollout import RolloutPlan, token_totals
from contagent.runner.run import prepare_rollouts
from contagent.runner.stopping.failfast import server_failure
from contagent.runner.tasks.experiment import load_experiment
from contagent.validate.check import validate
from contagent.viewer.rollout_view import raw_exchange
from contagent.viewer.source import open_source
from tests.helpers import cli
from tests.runner.helpers import write_experiment
from tools.corpus import make_rollout


def _rows(results: Path) -> list[dict]:
    return [orjson.loads(line) for line in results.read_bytes().splitlines()]


def _without_path(row: dict) -> dict:
    return {**row, "raw_log": {k: v for k, v in row["raw_log"].items() if k != "path"}}


def test_export_is_identical_across_compaction_and_an_earlier_export_still_validates(
    samples: Path, tmp_path: Path
) -> None:
    before = export([samples], tmp_path / "before", ExportOptions(filter="all"))
    compact_dirs([samples])
    assert not list(samples.rglob("exchanges.jsonl"))
    after = export([samples], tmp_path / "after", ExportOptions(filter="all"))
    old, new = _rows(tmp_path / "before/results.jsonl"), _rows(tmp_path / "after/results.jsonl")
    assert [_without_path(r) for r in old] == [_without_path(r) for r in new]
    # raw_log.path names the file that exists; sha256 and bytes are the record stream's
    assert all(r["raw_log"]["path"].endswith("exchanges.jsonl.zst") for r in new)
    assert all(Path(r["raw_log"]["path"]).is_file() for r in new)
    assert before.raw_bytes == after.raw_bytes
    assert (tmp_path / "before/prime-sft/data").is_dir()
    for out in ("before", "after"):
        report = validate(tmp_path / out / "results.jsonl")
        assert report.ok, report.violations[:3]
        assert report.rows == len(old)


def test_validate_still_catches_a_changed_log_in_the_compacted_form(
    samples: Path, tmp_path: Path
) -> None:
    export([samples], tmp_path / "out", ExportOptions(formats=()))
    paths = RolloutPaths(samples / "clean_pass")
    data = paths.exchanges.read_bytes()
    compact_rollout(paths)
    paths.compacted.write_bytes(zstandard.ZstdCompressor().compress(data + b"\n"))
    report = validate(tmp_path / "out/results.jsonl")
    assert [v.reason for v in report.violations if v.rollout_id == "clean_pass"] == [
        "raw log changed since export (sha256 differs)"
    ]


def test_the_viewer_reads_both_forms_in_a_live_log_dir(samples: Path, tmp_path: Path) -> None:
    export([samples], tmp_path / "out", ExportOptions(formats=()))
    rows = {r["rollout_id"]: r for r in _rows(tmp_path / "out/results.jsonl")}
    source = open_source(samples)
    plain_entries = [(e.rollout_id, e.error) for e in source.entries]
    compact_rollout(RolloutPaths(samples / "clean_pass"))  # one rollout ends meanwhile
    live = open_source(samples)
    assert [(e.rollout_id, e.error) for e in live.entries] == plain_entries
    assert live.row("clean_pass") == source.row("clean_pass") | {
        "raw_log": live.row("clean_pass")["raw_log"]  # type: ignore[index]
    }
    # a row written before the compaction still opens its exchanges
    shown = raw_exchange(rows["clean_pass"], 0)
    assert shown.log_path.endswith("exchanges.jsonl.zst") and shown.request is not None
    with pytest.raises(ContagentError, match="more than 100 bytes"):
        raw_exchange(rows["clean_pass"], 0, max_raw_log=100)


def test_runner_readers_take_the_compacted_form(tmp_path: Path) -> None:
    paths = make_rollout(tmp_path, 0, 5, random.Random(0))
    plain_totals = token_totals(paths.exchanges)
    failed = tmp_path / "failed.jsonl"
    failed.write_bytes(
        b'{"type":"request","index":0}\n{"type":"outcome","index":0,"outcome":"upstream_error",'
        b'"status":null,"error":"upstream unreachable"}\n'
    )
    failed_paths = RolloutPaths(tmp_path / "failed")
    failed_paths.root.mkdir()
    shutil.move(failed, failed_paths.exchanges)
    reason = server_failure(failed_paths.exchanges)
    for p in (paths, failed_paths):
        assert compact_rollout(p).status == "compacted"
    assert token_totals(paths.raw_log) == plain_totals and plain_totals[0].exchanges == 6
    assert reason is not None and server_failure(failed_paths.raw_log) == reason


def test_resume_and_the_ray_transfer_take_the_compacted_form(tmp_path: Path) -> None:
    exp = load_experiment(write_experiment(tmp_path / "exps", "e", {"task": "t"}), None)
    node = RunPaths(tmp_path / "node")
    rollout = node.rollout("e")
    make_rollout(rollout.root.parent, 0, 3, random.Random(0)).root.rename(rollout.root)
    rollout.result.write_text(RolloutResult(rollout_id="e", status="passed").model_dump_json())
    plain = rollout.exchanges.read_bytes()
    compact_rollout(rollout)
    driver = RunPaths(tmp_path / "driver")
    land(driver, "e", pack(node, "e", "n1"))
    assert read_log_bytes(driver.rollout("e").raw_log) == plain
    assert driver.rollout("e").raw_log.name == "exchanges.jsonl.zst"
    todo, done = prepare_rollouts(driver, [RolloutPlan(exp, 0)], resume=True)
    assert todo == [] and [r.rollout_id for r in done] == ["e"]


# --- bounded decompression -----------------------------------------------------------------


def _zst(path: Path, data: bytes, *, declared: bool = True, **params: int) -> Path:
    cctx = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters.from_level(3, **params)
        if params
        else compression_parameters()
    )
    out = io.BytesIO()
    with cctx.stream_writer(out, size=len(data) if declared else -1, closefd=False) as w:
        w.write(data)
    path.write_bytes(out.getvalue())
    return path


LOG = b'{"type":"request","index":0,"method":"POST","path":"/v1/chat/completions"}\n'


@pytest.mark.parametrize("declared", [True, False])
def test_a_log_past_the_limit_is_refused_in_both_forms(tmp_path: Path, declared: bool) -> None:
    data = LOG * 1000
    plain = tmp_path / "exchanges.jsonl"
    plain.write_bytes(data)
    packed = _zst(tmp_path / "exchanges.jsonl.zst", data, declared=declared)
    for path in (plain, packed):
        assert read_log_bytes(path, len(data)) == data  # the limit counts plain bytes
        with pytest.raises(ContagentError, match=rf"^{path}: raw log holds more than"):
            read_exchanges(path, len(data) - 1)


def test_decompression_stops_at_the_limit_of_a_bomb(tmp_path: Path) -> None:
    bomb = _zst(tmp_path / "exchanges.jsonl.zst", b"\0" * (256 << 20), declared=False)
    assert bomb.stat().st_size < 64_000
    tracemalloc.start()
    try:
        with pytest.raises(ContagentError, match="more than"):
            read_log_bytes(bomb, 4 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda z: z[: len(z) // 2], "the file ends inside a frame"),
        (lambda z: z[:-1], "the file ends inside a frame"),
        (lambda z: z[:40] + bytes([z[40] ^ 0xFF]) + z[41:], "zstd decompress error"),
        (lambda z: z + b"trailing", "no zstd frame at byte"),
        (lambda z: b"", "the file is empty"),
        (lambda z: b"{not zstd}", "no zstd frame at byte 0"),
    ],
)
def test_a_corrupt_compacted_log_reads_as_one_problem_naming_the_file_and_byte(
    tmp_path: Path, mangle: object, message: str
) -> None:
    """Its readers of records see no record and the kind corrupt_log; a reader of its bytes
    gets the same one-line error."""
    path = _zst(tmp_path / "exchanges.jsonl.zst", LOG * 500)
    path.write_bytes(mangle(path.read_bytes()))  # type: ignore[operator]
    raw = read_exchanges(path)
    assert not raw.requests and not raw.outcomes
    ((kind, reason),) = raw.problems
    assert kind == "corrupt_log" and reason.startswith(f"{path}: corrupt compacted log: ")
    assert re.search(r"zstd fails at byte \d+ \(.*" + re.escape(message), reason), reason
    stored = path.read_bytes()
    assert (raw.size, raw.sha256) == (len(stored), hashlib.sha256(stored).hexdigest())
    with pytest.raises(CorruptLog) as err:
        read_log_bytes(path)
    assert str(err.value) == reason and "\n" not in reason


def test_a_line_that_corruption_made_unparsable_reads_as_corruption(tmp_path: Path) -> None:
    """Raw literals (a negative level) hold the record's bytes as they are: a flipped ``{``
    breaks the line's JSON before zstd's checksum, at the frame's end, finds the change."""
    packed = zstandard.ZstdCompressor(level=-5, write_checksum=True).compress(LOG)
    at = packed.index(b'{"type"')
    path = tmp_path / "exchanges.jsonl.zst"
    path.write_bytes(packed[:at] + b"[" + packed[at + 1 :])
    assert [k for k, _ in read_exchanges(path).problems] == ["corrupt_log"]
    # the same line in a sound frame is a malformed record, which stops the reader
    path.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(b"[" + LOG[1:]))
    with pytest.raises(ContagentError, match=r":1: malformed JSON"):
        read_exchanges(path)


def test_a_frame_needing_a_larger_window_than_compaction_uses_is_refused(tmp_path: Path) -> None:
    path = _zst(tmp_path / "exchanges.jsonl.zst", LOG * 500, declared=False, window_log=30)
    assert [k for k, _ in read_exchanges(path).problems] == ["corrupt_log"]


def _compacted_samples(samples: Path) -> dict[str, Path]:
    compact_dirs([samples])
    return {p.parent.name: p for p in samples.rglob("exchanges.jsonl.zst")}


def _flip(path: Path, at: float) -> int:
    data = bytearray(path.read_bytes())
    where = int(len(data) * at)
    data[where] ^= 0x04
    path.write_bytes(bytes(data))
    return where


@pytest.mark.parametrize("at", [0.02, 0.3, 0.6, 0.9, 0.999])
def test_a_flipped_bit_anywhere_is_found_at_or_after_its_byte(
    samples: Path, tmp_path: Path, at: float
) -> None:
    """zstd checks a frame's content only at its end: whatever a flipped bit does first (a
    bad block, a line that is not JSON, a wrong checksum), the log reads as corrupt, at a
    byte no earlier than the flip."""
    log = _compacted_samples(samples)["clean_pass"]
    where = _flip(log, at)
    ((kind, reason),) = read_exchanges(log).problems
    offset = int(re.search(r"zstd fails at byte (\d+)", reason)[1])  # type: ignore[index]
    assert kind == "corrupt_log" and where < offset <= log.stat().st_size


def test_an_export_with_corrupt_compacted_logs_keeps_every_other_rollout(
    samples: Path, tmp_path: Path
) -> None:
    """A truncated and a bit-flipped compacted log: each is a row that is not training-ready
    (corrupt_log, naming the file and the byte), the summary counts them, the export exits
    0 as for a torn plain log, every other row is what a sound export wrote, and validate
    finds the export healthy."""
    logs = _compacted_samples(samples)
    sound = tmp_path / "sound"
    assert cli("export", str(samples), "--out", str(sound), "--filter", "all").returncode == 0
    cut = logs["clean_pass"]
    cut.write_bytes(cut.read_bytes()[:-100])
    _flip(logs["fragments"], 0.5)
    out = tmp_path / "out"
    proc = cli("export", str(samples), "--out", str(out), "--filter", "all", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"not ready: corrupt_log +│ 2 ", proc.stderr), proc.stderr
    before = {r["rollout_id"]: r for r in _rows(sound / "results.jsonl")}
    after = {r["rollout_id"]: r for r in _rows(out / "results.jsonl")}
    assert after.keys() == before.keys()
    for rid in ("clean_pass", "fragments"):
        row = after.pop(rid)
        assert row["not_ready_kinds"][0] == "corrupt_log" and not row["training_ready"]
        assert (
            f"{logs[rid]}: corrupt compacted log: zstd fails at byte "
            in (row["training_ready_reason"])
        )
        assert row["steps"] == [] and row["raw_log"]["bytes"] == logs[rid].stat().st_size
        del before[rid]
    assert after == before
    summary = orjson.loads((out / "export-summary.json").read_bytes())
    assert summary["not_ready_reasons"]["corrupt_log"] == 2
    checked = cli("validate", str(out / "results.jsonl"))
    assert checked.returncode == 0, checked.stderr
    assert validate(out / "results.jsonl").ok


def test_concatenated_frames_read_as_one_stream(tmp_path: Path) -> None:
    one = _zst(tmp_path / "a.zst", LOG).read_bytes()
    two = _zst(tmp_path / "b.zst", LOG.replace(b":0", b":1"), declared=False).read_bytes()
    path = tmp_path / "exchanges.jsonl.zst"
    path.write_bytes(one + two)
    assert sorted(read_exchanges(path).requests) == [0, 1]


def test_cli_limit_option_for_export_validate_and_a_bad_value(
    samples: Path, tmp_path: Path
) -> None:
    compact_dirs([samples])
    small = cli("export", str(samples), "--out", str(tmp_path / "o"), "--max-raw-log", "1K")
    assert small.returncode == 2
    assert small.stderr.startswith("contagent: error: ") and "exchanges.jsonl.zst" in small.stderr
    assert "raw-log limit (--max-raw-log)" in small.stderr and small.stderr.count("\n") == 1
    ok = cli("export", str(samples), "--out", str(tmp_path / "o"), "--format", "results")
    assert ok.returncode == 0, ok.stderr
    results = str(tmp_path / "o/results.jsonl")
    assert cli("validate", results, "--max-raw-log", "1G").returncode == 0
    over = cli("validate", results, "--max-raw-log", "1k")
    assert over.returncode == 1 and "raw log unusable" in over.stdout + over.stderr
    bad = cli("validate", results, "--max-raw-log", "lots")
    assert bad.returncode == 2 and "--max-raw-log 'lots' is not a size" in bad.stderr
