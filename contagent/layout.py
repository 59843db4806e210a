"""Where things live on disk: one frozen dataclass per directory kind."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from contagent.errors import ContagentError

_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def safe_segment(name: str, what: str = "name") -> str:
    """Return ``name`` if it is one harmless path segment, else raise.

    Rollout ids, experiment names and skill names become directory names; a
    value such as ``../x`` or ``a/b`` would let input write outside its folder.
    """
    if not _SAFE_SEGMENT.match(name) or name in {".", ".."}:
        raise ContagentError(f"{what} {name!r} is not a safe single path segment")
    return name


@dataclass(frozen=True)
class RolloutPaths:
    """The files of one rollout.

    ::

        <root>/                       one rollout (its name is the rollout id)
        ├── exchanges.jsonl           raw exchange log, append-only (the proxy writes it)
        └── result.json               outcome of the run (the runner writes it; optional)

    A record directory written by ``contagent proxy`` holds one such folder
    per rollout; ``contagent run`` puts them under ``<log-dir>/rollouts/``.
    """

    root: Path

    @property
    def rollout_id(self) -> str:
        return self.root.name

    @property
    def exchanges(self) -> Path:
        return self.root / "exchanges.jsonl"

    @property
    def result(self) -> Path:
        return self.root / "result.json"

    @classmethod
    def for_rollout(cls, record_dir: Path, rollout_id: str) -> RolloutPaths:
        return cls(Path(record_dir) / safe_segment(rollout_id, "rollout id"))


def find_rollouts(run_dirs: list[Path]) -> list[RolloutPaths]:
    """Every rollout directory at or below each of ``run_dirs``, sorted, deduplicated."""
    found: dict[Path, RolloutPaths] = {}
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        if not run_dir.exists():
            raise ContagentError(f"{run_dir}: no such directory")
        if not run_dir.is_dir():
            raise ContagentError(f"{run_dir}: not a directory")
        for log in run_dir.rglob("exchanges.jsonl"):  # the folder's own log included
            if log.is_file():
                paths = RolloutPaths(log.parent.resolve())
                found.setdefault(paths.root, paths)
    if not found:
        names = ", ".join(str(d) for d in run_dirs)
        raise ContagentError(f"no rollout (a folder with exchanges.jsonl) under {names}")
    return sorted(found.values(), key=lambda p: str(p.root))


@dataclass(frozen=True)
class RunPaths:
    """The files ``contagent run`` writes under ``--log-dir``.

    ::

        <log-dir>/
        ├── <name>.log                 OpenHands events, one JSON object a line
        ├── <name>.result              evaluate.sh output and the verdict
        ├── <name>.err                 stderr of the runner container
        ├── rollouts/
        │   └── <name>/                a RolloutPaths: exchanges.jsonl + result.json
        ├── superseded/<name>-<time>/  an unfinished earlier attempt moved aside by --resume
        └── .incoming/<name>-<id>/     a Ray rollout's files while they are checked and moved in

    ``<name>`` is the rollout id: the experiment name, with ``_r<k>`` appended
    for repeats after the first. ``contagent export <log-dir>/rollouts`` reads
    the rollout folders directly.
    """

    root: Path

    @property
    def rollouts_dir(self) -> Path:
        return self.root / "rollouts"

    @property
    def superseded_dir(self) -> Path:
        return self.root / "superseded"

    @property
    def incoming_dir(self) -> Path:
        return self.root / ".incoming"

    def rollout(self, name: str) -> RolloutPaths:
        return RolloutPaths.for_rollout(self.rollouts_dir, name)

    def log(self, name: str) -> Path:
        return self.root / f"{safe_segment(name, 'rollout id')}.log"

    def result_text(self, name: str) -> Path:
        return self.root / f"{safe_segment(name, 'rollout id')}.result"

    def err(self, name: str) -> Path:
        return self.root / f"{safe_segment(name, 'rollout id')}.err"

    def files_of(self, name: str) -> list[Path]:
        """Everything one rollout writes (for --resume's clean-up of an unfinished attempt)."""
        return [self.log(name), self.result_text(name), self.err(name), self.rollout(name).root]
