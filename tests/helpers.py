"""Helpers shared by the test folders (fixtures stay in the conftest files)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from tools.sample_base import Expected

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cli(
    *args: str,
    check: bool = False,
    cwd: Path = REPO,
    env: dict[str, str | None] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run the real ``contagent`` command in a subprocess.

    ``env`` is added to this process's environment (``None`` values remove a variable).
    """
    environ = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    proc = subprocess.run(
        [sys.executable, "-m", "contagent", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"contagent {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def read_rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def write_rows(path: Path, rows: list[dict]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def assert_same_as_generated(
    committed: Path, generated: Path, names: list[str], command: str
) -> None:
    """The committed sample folder holds exactly what its generator writes (``command``)."""
    assert (committed / "expected.json").read_bytes() == (generated / "expected.json").read_bytes()
    for name in names:
        for file in ("exchanges.jsonl", "result.json"):
            assert (committed / name / file).read_bytes() == (
                generated / name / file
            ).read_bytes(), f"{committed / name / file} is stale: run {command}"


def export_and_validate(root: Path) -> dict[str, dict]:
    """Export every rollout under ``root`` (``--filter all``), require a healthy validation,
    and return the rows by rollout id."""
    from contagent.exporters.export import ExportOptions, export
    from contagent.validate.check import validate

    out = root / "out"
    export([root], out, ExportOptions(filter="all"))
    report = validate(out / "results.jsonl")
    assert report.ok, report
    return {row["rollout_id"]: row for row in read_rows(out / "results.jsonl")}


def assert_outcome(row: dict[str, Any], expected: Expected) -> None:
    """A sample's row has the outcome its generator declares."""
    assert row["training_ready"] is expected.training_ready, row["training_ready_reason"]
    assert dict(Counter(e["reason"] for e in row["excluded"])) == expected.excluded
    assert row["branches"] == expected.branches
    assert len(row["repairs"]) == expected.repairs
    assert row["truncated"] is expected.truncated
    assert bool(row["not_ready_kinds"]) is not expected.training_ready
    if expected.kinds:
        assert tuple(row["not_ready_kinds"]) == expected.kinds, row["training_ready_reason"]
    if expected.reason:
        assert expected.reason in row["training_ready_reason"]
    else:
        assert row["training_ready_reason"] is None
