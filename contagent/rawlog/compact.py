"""Compact a finished rollout's raw log: ``exchanges.jsonl`` -> ``exchanges.jsonl.zst``.

Every request resends the whole history, so a raw log grows with the square of
the rollout's length; zstd with long-distance matching (a 2^27-byte window)
stores a 200-step log in 0.4% of that (docs/benchmarks.md). The compacted log is one zstd frame of exactly
the recorded bytes, so its record stream, SHA-256 and size are the plain log's.

A SIGKILL at any moment leaves one of the two forms whole:

1. the plain log is locked as the proxy locks it (a log still being recorded is
   skipped, with a note);
2. the compressed bytes go to a hidden temporary name, are synced, and are read
   back and checked against the plain bytes (SHA-256 and length);
3. only then is the temporary file renamed into place, and the plain log removed;
   the folder is synced after each step.

A compacted log beside its plain log is therefore a verified copy (a kill came
between steps 3's rename and removal); readers read it, and the next compaction
checks the two agree and removes the plain one. Compacting twice changes nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import zstandard

from contagent.errors import ContagentError
from contagent.layout import RolloutPaths, find_rollouts
from contagent.rawlog.stream import ZSTD_LEVEL, ZSTD_WINDOW_LOG, zstd_decompressor

Status = Literal["compacted", "already", "busy", "skipped", "failed"]
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Compaction:
    """What compacting one rollout did; ``note`` says why when it did nothing."""

    root: Path
    status: Status
    plain_bytes: int = 0
    stored_bytes: int = 0
    note: str = ""


def compression_parameters() -> zstandard.ZstdCompressionParameters:
    return zstandard.ZstdCompressionParameters.from_level(
        ZSTD_LEVEL,
        window_log=ZSTD_WINDOW_LOG,
        enable_ldm=True,
        write_checksum=True,
        write_content_size=True,
    )


def compact_dirs(
    run_dirs: list[Path], on_each: Callable[[Compaction], None] | None = None
) -> list[Compaction]:
    """Compact every rollout at or below ``run_dirs`` (as ``contagent export`` finds them)."""
    done = []
    for paths in find_rollouts(run_dirs):
        result = compact_rollout(paths)
        done.append(result)
        if on_each is not None:
            on_each(result)
    return done


def compact_rollout(paths: RolloutPaths) -> Compaction:
    """Compact one rollout's raw log; never raises for a log it cannot compact."""
    try:
        fd = os.open(paths.exchanges, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if paths.compacted.is_file():
            paths.compacting.unlink(missing_ok=True)  # what a killed compaction left
            return Compaction(paths.root, "already")
        return Compaction(paths.root, "skipped", note="no raw log")
    except OSError as exc:
        return Compaction(paths.root, "skipped", note=f"cannot open it ({exc.strerror})")
    try:
        return _compact_locked(paths, fd)
    except (OSError, zstandard.ZstdError, ContagentError) as exc:
        paths.compacting.unlink(missing_ok=True)
        reason = getattr(exc, "strerror", None) or str(exc)
        return Compaction(paths.root, "failed", note=f"{reason}; the plain log is kept")
    finally:
        os.close(fd)


def _compact_locked(paths: RolloutPaths, fd: int) -> Compaction:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return Compaction(paths.root, "skipped", note="the raw log is not a regular file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return Compaction(
            paths.root, "busy", note="still being recorded (a proxy holds its lock); left as is"
        )
    except OSError as exc:
        return Compaction(
            paths.root,
            "skipped",
            note=f"cannot lock it ({exc.strerror}), so cannot tell whether it is still recorded",
        )
    st = os.fstat(fd)
    if st.st_nlink == 0:  # another compaction finished while this one waited
        return Compaction(paths.root, "already")
    if paths.compacted.exists():
        plain = _digest_plain(fd)
        if _digest_compacted(paths.compacted) != plain:
            raise ContagentError(f"{paths.compacted} and {paths.exchanges} differ; both are kept")
    else:
        _write_compacted(paths, fd, st.st_size)
    os.unlink(paths.exchanges)
    _sync_dir(paths.root)
    return Compaction(paths.root, "compacted", st.st_size, paths.compacted.stat().st_size)


def _write_compacted(paths: RolloutPaths, fd: int, size: int) -> None:
    tmp = paths.compacting
    digest = hashlib.sha256()
    cctx = zstandard.ZstdCompressor(compression_params=compression_parameters())
    with open(tmp, "wb") as out:
        with cctx.stream_writer(out, size=size, closefd=False) as writer:
            while chunk := os.read(fd, _CHUNK):
                digest.update(chunk)
                writer.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    if os.fstat(fd).st_size != size:
        raise ContagentError(f"{paths.exchanges} changed while it was compacted")
    if _digest_compacted(tmp) != (digest.hexdigest(), size):
        raise ContagentError(f"{tmp} does not decompress to the recorded bytes")
    os.replace(tmp, paths.compacted)
    _sync_dir(paths.root)


def _digest_plain(fd: int) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def _digest_compacted(path: Path) -> tuple[str, int]:
    """SHA-256 and length of what ``path`` decompresses to, read as a stream."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as fh:
        reader = zstd_decompressor().stream_reader(fh, read_across_frames=True)
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
