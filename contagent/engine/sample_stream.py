"""``contagent run --stream-samples PATH``: each finished group, as the run goes.

A group is an experiment's (or Harbor task's) rollouts with one agent across
``--repeat``. When its last rollout ended, its samples (the tokens format's
rows, made by :func:`~contagent.engine.group_build.build_group` as the engine makes them) are written as one Parquet shard under the run's
``--log-dir`` (``stream/group-<id>.parquet``), then one JSON line naming the shard
is appended to PATH. PATH may be a file or a named pipe: writing blocks until the
line is taken, so a pipe with no reader holds the run back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from contagent.engine.group_build import Group, RolloutOutcome, build_group, export_options
from contagent.errors import ContagentError
from contagent.export.exporter import ExportOptions
from contagent.export.formats.tokens_format import TOKENS_SCHEMA
from contagent.layout import RunPaths
from contagent.runner.summary import RunEvent

#: A shard's columns: the tokens format's.
STREAM_SCHEMA = TOKENS_SCHEMA

#: Where the shards go, under --log-dir.
STREAM_DIR = "stream"


def group_line(group: Group, shard: Path) -> dict[str, Any]:
    """The JSON line for one group."""
    return {
        "group_id": group.group_id,
        "task": group.task,
        "agent": group.agent,
        "complete": group.complete,
        "rollouts": [o.rollout_id for o in group.rollouts],
        "rewards": group.rewards,
        "failed": [
            {"rollout_id": o.rollout_id, "status": o.result.status, "error": o.result.error}
            for o in group.failed
        ],
        "no_samples": {o.rollout_id: o.no_samples for o in group.rollouts if o.no_samples},
        "samples": len(group.samples),
        "shard": str(shard),
        "finished_at": group.finished_at,
    }


class SampleStream:
    """Listens to a run's events and streams each group once its ``repeat`` rollouts ended."""

    def __init__(
        self, path: Path, log_dir: Path, repeat: int, options: ExportOptions | None = None
    ) -> None:
        self.path = Path(path)
        self._paths = RunPaths(Path(log_dir))
        self._repeat = repeat
        self._options = export_options(options)
        self._open: dict[tuple[str, str], dict[int, RolloutOutcome]] = {}
        self._ids: dict[tuple[str, str], int] = {}
        self._out: IO[bytes] | None = None
        self.written = 0

    def on_event(self, event: RunEvent) -> None:
        result = event.result
        if event.kind not in ("finished", "skipped") or result is None:
            return
        key = (result.experiment or result.rollout_id, result.agent or "")
        members = self._open.setdefault(key, {})
        gid = self._ids.setdefault(key, len(self._ids))
        members[result.repeat_index or 0] = RolloutOutcome(result.rollout_id, result, 1)
        if len(members) < self._repeat:
            return
        del self._open[key]
        ordered = [members[k] for k in sorted(members)]
        group = build_group(gid, key[0], key[1], ordered, self._paths, self._options, version=0)
        self.write(group)

    def write(self, group: Group) -> None:
        """The group's shard, then its line (blocking while a pipe's reader lags)."""
        folder = self._paths.root / STREAM_DIR
        folder.mkdir(parents=True, exist_ok=True)
        shard = folder / f"group-{group.group_id:06d}.parquet"
        tmp = shard.with_name(f".{shard.name}.tmp")
        pq.write_table(pa.Table.from_pylist(group.samples, schema=STREAM_SCHEMA), tmp)
        os.replace(tmp, shard)
        line = orjson.dumps(group_line(group, shard)) + b"\n"
        try:
            if self._out is None:
                self._out = open(self.path, "ab", buffering=0)  # a pipe: waits for a reader
            self._out.write(line)
        except OSError as exc:
            raise ContagentError(
                f"--stream-samples {self.path}: cannot write ({exc.strerror or exc})"
            ) from None
        self.written += 1

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
