"""A finished rollout's files moved between machines: packed with the SHA-256 of every file
where the rollout ran, checked and moved into ``--log-dir`` where the run is driven.

A rollout appears in ``--log-dir`` complete or not at all: its side files first, then its
rollout folder in one rename. A shipment that fails a check is kept under ``superseded/``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult, load_result
from contagent.runner import docker_ops
from contagent.runner.config import RunConfig
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.runner.lifecycle.rollout_lifecycle import rollout_result


@dataclass(frozen=True)
class Shipment:
    """A finished rollout's files, as a node returns them to the driver."""

    node: str
    archive: bytes  # tar of the rollout's files, paths relative to --log-dir
    sha256: dict[str, str]  # every regular file in ``archive`` -> its digest


def _digest(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def pack(paths: RunPaths, name: str, node: str) -> Shipment:
    """The rollout's files under ``paths`` as one archive, with every file's digest."""
    entries: list[tuple[str, Path | bytes, int]] = []
    sums: dict[str, str] = {}
    for path in paths.files_of(name):
        if not path.exists():
            continue
        entries.append((path.relative_to(paths.root).as_posix(), path, 0o644))
        for f in [path] if path.is_file() else _files(path):
            sums[f.relative_to(paths.root).as_posix()] = _digest(f)
    if paths.rollout(name).result.relative_to(paths.root).as_posix() not in sums:
        raise ContagentError(f"rollout {name}: no result.json was written on node {node}")
    return Shipment(node=node, archive=docker_ops.make_tar(entries), sha256=sums)


def _move_in(paths: RunPaths, staged: RunPaths, name: str) -> None:
    """Move a staged rollout into place: the side files, then the rollout folder in one rename."""
    for src, dest in (
        (staged.log(name), paths.log(name)),
        (staged.result_text(name), paths.result_text(name)),
        (staged.err(name), paths.err(name)),
    ):
        if src.exists():
            os.replace(src, dest)
    paths.rollouts_dir.mkdir(parents=True, exist_ok=True)
    target = paths.rollout(name).root
    if target.exists():
        raise ContagentError(f"rollout {name}: {target} appeared while the run was writing it")
    os.rename(staged.rollout(name).root, target)


def set_aside(paths: RunPaths, staging: Path) -> Path:
    aside = paths.superseded_dir / f"{staging.name}-{time.strftime('%Y%m%dT%H%M%S')}"
    aside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(staging), str(aside))
    return aside


def land(paths: RunPaths, name: str, shipment: Shipment) -> RolloutResult:
    """Check a shipment against its digests and move it into ``paths``; raise if it is not whole.

    A shipment that fails a check is kept under ``superseded/`` for inspection.
    """
    staging = paths.incoming_dir / f"{name}-{uuid.uuid4().hex[:8]}"
    staged = RunPaths(staging)
    try:
        docker_ops.extract_tar([shipment.archive], staging)
        got = {f.relative_to(staging).as_posix(): _digest(f) for f in _files(staging)}
        bad = sorted(
            k for k in got.keys() | shipment.sha256.keys() if got.get(k) != shipment.sha256.get(k)
        )
        if bad:
            raise ContagentError(
                f"{len(bad)} file(s) differ from what node {shipment.node} sent, first {bad[0]}"
            )
        result = load_result(staged.rollout(name).result)
        if result is None:
            raise ContagentError("it holds no result.json")
        if result.rollout_id != name:
            raise ContagentError(f"its result.json is rollout {result.rollout_id!r}")
    except (ContagentError, OSError, ValueError) as exc:
        aside = set_aside(paths, staging) if staging.exists() else None
        reason = str(exc).splitlines()[0][:300]
        kept = f"; kept in {aside}" if aside else ""
        raise ContagentError(f"rollout {name}: files from node not whole: {reason}{kept}") from None
    _move_in(paths, staged, name)
    _drop(staging)
    return result


def _drop(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.parent.rmdir()  # only when no other rollout is being moved in
    except OSError:
        pass


def record_failure(
    paths: RunPaths, config: RunConfig, plan: RolloutPlan, reason: str, started: float
) -> RolloutResult:
    """An ``infra_error`` result for a rollout whose task failed for good (``--resume`` reruns it)."""
    name = plan.name
    result = rollout_result(
        plan, config, "infra_error", reason, started,
        model=config.llm.served_model_name, duration_s=time.time() - started,
        image=config.image_for(plan.agent), agent=plan.agent,
    )  # fmt: skip
    if paths.rollout(name).root.exists():
        return result  # landed already; the files there are the rollout's own
    staged = RunPaths(paths.incoming_dir / f"{name}-{uuid.uuid4().hex[:8]}")
    staged.rollout(name).root.mkdir(parents=True)
    staged.rollout(name).result.write_text(result.model_dump_json(indent=2))
    staged.result_text(name).write_text(f"== verdict: infra_error ==\n{reason}\n")
    _move_in(paths, staged, name)
    _drop(staged.root)
    return result
