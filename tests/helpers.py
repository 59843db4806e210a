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
    from contagent.export.exporter import ExportOptions, export
    from contagent.validate.check import validate

    out = root / "out"
    export([root], out, ExportOptions(filter="all"))
    report = validate(out / "results.jsonl")
    assert report.ok, report
    return {row["rollout_id"]: row for row in read_rows(out / "results.jsonl")}


def cli_export_and_validate(src: Path, out: Path, *formats: str) -> dict[str, dict]:
    """``contagent export SRC --out OUT --filter all`` (each of ``formats`` as a
    ``--format``), then ``contagent validate``, both required to succeed; the rows by
    rollout id."""
    picked = [arg for name in formats for arg in ("--format", name)]
    proc = cli("export", str(src), "--out", str(out), "--filter", "all", *picked)
    assert proc.returncode == 0, proc.stderr
    proc = cli("validate", str(out / "results.jsonl"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
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


#: The bundled sample with a Responses namespace and built-in tool.
BUILTIN_TOOLS_SAMPLE = REPO / "data" / "rollouts" / "responses" / "responses_builtin_tools"
VLLM_SERVER = {"name": "vllm", "version": "0.32.0"}
SPAWN_ARGUMENTS = '{"task": "write pass:hunter2 to result.txt"}'


def builtin_tools_on_vllm(dest: Path, rollout_id: str = "responses_builtin_tools_vllm") -> Path:
    """A copy of the built-in-tools sample, under ``dest/<rollout_id>``, as run against vLLM:
    ``result.json`` names the server, and the second call goes to the namespace's function
    (vLLM answers it with ``name`` and ``namespace`` apart; the agent sends it back so)."""
    folder = dest / rollout_id
    folder.mkdir(parents=True)
    result = orjson.loads((BUILTIN_TOOLS_SAMPLE / "result.json").read_bytes())
    result.update(rollout_id=rollout_id, server=VLLM_SERVER)
    (folder / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    lines = []
    for line in (BUILTIN_TOOLS_SAMPLE / "exchanges.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)
        rec["rollout_id"] = rollout_id
        items = (rec.get("response") or {}).get("output") or (rec.get("body") or {}).get("input")
        for item in items or ():
            if item.get("type") == "function_call" and item.get("call_id") == "call_2":
                item.update(name="spawn_agent", namespace="multi_agent", arguments=SPAWN_ARGUMENTS)
        lines.append(orjson.dumps(rec) + b"\n")
    (folder / "exchanges.jsonl").write_bytes(b"".join(lines))
    return folder
