"""Compaction: crash-safe at every step, idempotent, and never of a log still recorded."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contagent.layout import RolloutPaths, find_rollouts
from contagent.proxy.recorder import Recorder, RecordError
from contagent.rawlog.compact import compact_dirs, compact_rollout
from contagent.rawlog.stream import read_log_bytes
from tests.helpers import REPO, cli
from tools.corpus import make_rollout


def _rollout(root: Path, steps: int = 12, n: int = 0) -> tuple[RolloutPaths, bytes]:
    paths = make_rollout(root, n, steps, random.Random(n))
    return paths, paths.exchanges.read_bytes()


def _whole(paths: RolloutPaths, plain: bytes) -> str:
    """Which form holds the log; fails unless one of them is there, whole."""
    forms = [p.name for p in (paths.exchanges, paths.compacted) if p.exists()]
    assert forms, f"{paths.root}: neither form of the raw log is left"
    if paths.compacted.exists():
        assert read_log_bytes(paths.compacted) == plain
    if paths.exchanges.exists():
        assert paths.exchanges.read_bytes() == plain
    return "+".join(forms)


def test_compaction_keeps_the_bytes_and_twice_changes_nothing(tmp_path: Path) -> None:
    paths, plain = _rollout(tmp_path)
    done = compact_rollout(paths)
    assert done.status == "compacted" and done.plain_bytes == len(plain)
    assert not paths.exchanges.exists() and not paths.compacting.exists()
    assert read_log_bytes(paths.compacted) == plain
    # the stored form is the documented one: `zstd -d --long=27` reads it
    assert paths.compacted.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    stored = paths.compacted.read_bytes()
    again = compact_rollout(paths)
    assert again.status == "already"
    assert paths.compacted.read_bytes() == stored
    assert [p.root for p in find_rollouts([tmp_path])] == [paths.root.resolve()]


def test_a_log_the_proxy_still_records_is_skipped_with_a_note(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)
    recorder.append("live", {"type": "request", "index": recorder.next_index("live")})
    paths = RolloutPaths.for_rollout(tmp_path, "live")
    try:
        done = compact_rollout(paths)
        assert done.status == "busy" and "lock" in done.note
        assert paths.exchanges.exists() and not paths.compacted.exists()
    finally:
        recorder.close()
    assert compact_rollout(paths).status == "compacted"


def test_the_proxy_refuses_to_record_more_of_a_compacted_rollout(tmp_path: Path) -> None:
    paths, _ = _rollout(tmp_path)
    compact_rollout(paths)
    recorder = Recorder(tmp_path)
    with pytest.raises(RecordError, match="compacted"):
        recorder.next_index(paths.rollout_id)
    recorder.close()
    assert not paths.exchanges.exists()  # no empty plain log beside the compacted one


def test_a_kill_between_rename_and_removal_leaves_a_verified_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, plain = _rollout(tmp_path)
    real_unlink = os.unlink

    def killed(path: object, *args: object, **kwargs: object) -> None:
        if Path(str(path)) == paths.exchanges:
            raise KeyboardInterrupt  # stands for the SIGKILL: nothing after it runs
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", killed)
    with pytest.raises(KeyboardInterrupt):
        compact_rollout(paths)
    monkeypatch.undo()
    assert _whole(paths, plain) == "exchanges.jsonl+exchanges.jsonl.zst"
    assert read_log_bytes(paths.raw_log) == plain  # readers take the compacted copy
    assert compact_rollout(paths).status == "compacted"
    assert _whole(paths, plain) == "exchanges.jsonl.zst"


def test_a_compacted_copy_that_differs_is_never_trusted(tmp_path: Path) -> None:
    paths, plain = _rollout(tmp_path)
    compact_rollout(paths)
    paths.exchanges.write_bytes(plain + b'{"type":"request","index":99}\n')
    done = compact_rollout(paths)
    assert done.status == "failed" and "differ" in done.note
    assert paths.exchanges.exists() and paths.compacted.exists()


def test_a_stale_temporary_file_is_overwritten(tmp_path: Path) -> None:
    paths, plain = _rollout(tmp_path)
    paths.compacting.write_bytes(b"half a zstd frame")
    assert compact_rollout(paths).status == "compacted"
    assert _whole(paths, plain) == "exchanges.jsonl.zst"
    assert not paths.compacting.exists()


_CHILD = """
import sys, time
from pathlib import Path
from contagent.rawlog.compact import compact_dirs
print("ready", flush=True)
t = time.monotonic()
compact_dirs([Path(sys.argv[1])])
print(time.monotonic() - t, flush=True)
"""


def test_sigkill_at_random_points_leaves_one_form_whole(tmp_path: Path) -> None:
    """SIGKILL a compaction at random moments of its run; every time, one form of each
    log is whole, and the next compaction finishes the job."""
    corpus = tmp_path / "corpus"
    logs = [_rollout(corpus, steps=70, n=n) for n in range(3)]
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", _CHILD, str(corpus)]

    def restore() -> None:
        for paths, plain in logs:
            for p in (paths.compacted, paths.compacting):
                p.unlink(missing_ok=True)
            paths.exchanges.write_bytes(plain)

    def started() -> subprocess.Popen[str]:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc

    calibration = started()
    out, _ = calibration.communicate()
    full = float(out)
    for _ in range(12):
        restore()
        proc = started()
        time.sleep(rng.uniform(0.0, 1.1) * full)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for paths, plain in logs:
            _whole(paths, plain)
        assert cli("compact", str(corpus)).returncode == 0
        for paths, plain in logs:
            assert _whole(paths, plain) == "exchanges.jsonl.zst"


def test_compact_cli_reports_each_outcome_and_exits_nonzero_when_one_is_left(
    tmp_path: Path,
) -> None:
    done, _ = _rollout(tmp_path, n=0)
    busy, _ = _rollout(tmp_path, n=1)
    fd = os.open(busy.exchanges, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a recording proxy holds
    try:
        proc = cli("compact", str(tmp_path))
    finally:
        os.close(fd)
    assert proc.returncode == 1
    assert f"compacted {done.root}" in proc.stderr
    assert f"busy {busy.root}: still being recorded" in proc.stderr
    assert "1 compacted" in proc.stderr and "1 left as they are" in proc.stderr
    again = cli("compact", str(tmp_path))
    assert again.returncode == 0 and "1 already compacted" in again.stderr
    assert [c.status for c in compact_dirs([tmp_path])] == ["already", "already"]
