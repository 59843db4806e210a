"""Where things live on disk: one frozen dataclass per directory kind."""

from __future__ import annotations

import os
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


#: File names of a rollout's raw exchange log: as recorded, and compacted (zstd).
RAW_LOG_NAME = "exchanges.jsonl"
COMPACTED_LOG_NAME = "exchanges.jsonl.zst"
RAW_LOG_NAMES = (RAW_LOG_NAME, COMPACTED_LOG_NAME)


@dataclass(frozen=True)
class RolloutPaths:
    """The files of one rollout.

    ::

        <root>/                       one rollout (its name is the rollout id)
        ├── exchanges.jsonl           raw exchange log, append-only (the proxy writes it)
        ├── exchanges.jsonl.zst       the same log once compacted (replaces exchanges.jsonl)
        ├── .exchanges.jsonl.zst.tmp  a compaction in progress (never read)
        ├── result.json               outcome of the run (the runner writes it; optional)
        └── reward.json               the reward a harness gave a rollout of the proxy alone

    A record directory written by ``contagent proxy`` holds one such folder
    per rollout; ``contagent run`` puts them under ``<log-dir>/rollouts/``.
    The compacted log, when there is one, is a verified copy of the whole
    recorded log, so it is the one read when both are there.
    """

    root: Path

    @property
    def rollout_id(self) -> str:
        return self.root.name

    @property
    def exchanges(self) -> Path:
        """The log as the proxy records it (plain JSON lines)."""
        return self.root / RAW_LOG_NAME

    @property
    def compacted(self) -> Path:
        """The log once compacted: one zstd stream of the same bytes."""
        return self.root / COMPACTED_LOG_NAME

    @property
    def compacting(self) -> Path:
        """Where a compaction writes before the compacted log is renamed into place."""
        return self.root / f".{COMPACTED_LOG_NAME}.tmp"

    @property
    def raw_log(self) -> Path:
        """The raw log on disk: the compacted one if there is one, else the plain one."""
        return self.compacted if self.compacted.is_file() else self.exchanges

    @classmethod
    def of_raw_log(cls, log: Path) -> RolloutPaths | None:
        """The rollout whose raw log (in either form) ``log`` names; None for another name."""
        log = Path(log)
        return cls(log.parent) if log.name in RAW_LOG_NAMES else None

    @property
    def result(self) -> Path:
        return self.root / "result.json"

    @property
    def reward(self) -> Path:
        """A harness's reward for a rollout of the proxy alone (:mod:`~contagent.rawlog.reward`)."""
        return self.root / "reward.json"

    @classmethod
    def for_rollout(cls, record_dir: Path, rollout_id: str) -> RolloutPaths:
        return cls(Path(record_dir) / safe_segment(rollout_id, "rollout id"))


def _unreadable(error: OSError) -> None:
    """A folder that cannot be listed would silently drop its rollouts: stop instead."""
    raise ContagentError(f"{error.filename}: cannot read ({error.strerror})")


def find_rollouts(run_dirs: list[Path]) -> list[RolloutPaths]:
    """Every rollout directory at or below each of ``run_dirs``, sorted, deduplicated.

    A rollout directory holds ``exchanges.jsonl`` or ``exchanges.jsonl.zst``.
    Symbolic links to folders are followed (each real folder is walked once, so a
    link loop ends); a raw-log link whose target is gone is an error.
    """
    found: dict[Path, RolloutPaths] = {}
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        if not run_dir.exists():
            raise ContagentError(f"{run_dir}: no such directory")
        if not run_dir.is_dir():
            raise ContagentError(f"{run_dir}: not a directory")
        walked: set[tuple[int, int]] = set()
        for folder, dirs, files in os.walk(run_dir, onerror=_unreadable, followlinks=True):
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in walked:
                dirs[:] = []
                continue
            walked.add((st.st_dev, st.st_ino))
            dirs.sort()
            for name in RAW_LOG_NAMES:
                if name not in files:
                    continue
                log = Path(folder) / name
                if not log.exists():
                    raise ContagentError(f"{log}: a link to a raw exchange log that does not exist")
                if log.is_file():
                    paths = RolloutPaths(log.parent.resolve())
                    found.setdefault(paths.root, paths)
    if not found:
        names = ", ".join(str(d) for d in run_dirs)
        raise ContagentError(
            f"no rollout (a folder with {RAW_LOG_NAME} or {COMPACTED_LOG_NAME}) under {names}"
        )
    return sorted(found.values(), key=lambda p: str(p.root))


@dataclass(frozen=True)
class RunPaths:
    """The files ``contagent run`` writes under ``--log-dir``.

    ::

        <log-dir>/
        ├── <name>.log                 the agent's events, one JSON object a line
        ├── <name>.result              evaluate.sh output and the verdict
        ├── <name>.err                 stderr of the runner container
        ├── rollouts/
        │   └── <name>/                a RolloutPaths: the raw log + result.json
        ├── superseded/<name>-<time>/  an unfinished earlier attempt moved aside by --resume
        ├── runs/<run-id>.log          what each run said on the way out (stops, the summary)
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

    @property
    def policy_journal(self) -> Path:
        """A rollout engine's policy versions and pauses, one JSON line each."""
        return self.root / "policy.jsonl"

    def rollout(self, name: str) -> RolloutPaths:
        return RolloutPaths.for_rollout(self.rollouts_dir, name)

    def run_log(self, run_id: str) -> Path:
        return self.root / "runs" / f"{safe_segment(run_id, 'run id')}.log"

    def log(self, name: str) -> Path:
        return self.root / f"{safe_segment(name, 'rollout id')}.log"

    def result_text(self, name: str) -> Path:
        return self.root / f"{safe_segment(name, 'rollout id')}.result"

    def err(self, name: str) -> Path:
        return self.root / f"{safe_segment(name, 'rollout id')}.err"

    def files_of(self, name: str) -> list[Path]:
        """Everything one rollout writes (for --resume's clean-up of an unfinished attempt)."""
        return [self.log(name), self.result_text(name), self.err(name), self.rollout(name).root]


@dataclass(frozen=True)
class DatasetFolderPaths:
    """One Hub-ready dataset folder (one training format) inside an export.

    ::

        <root>/                                  e.g. OUT/prime-sft, OUT/trl
        ├── README.md                            dataset card: YAML (configs, features, splits) + prose
        ├── images/*.png                         the card's charts (contagent.charts.export_charts)
        └── data/
            ├── train-00000-of-00002.parquet     shards, named the way the Hub names them
            └── train-00001-of-00002.parquet

    The card's ``configs`` point the ``train`` split at :data:`SHARD_GLOB`, so
    ``datasets.load_dataset(folder)`` and ``load_dataset("ORG/NAME")`` read the same files.
    """

    root: Path

    DATA_DIR = "data"
    CARD_NAME = "README.md"
    IMAGES_DIR = "images"
    SHARD_GLOB = "data/train-*"
    """What the card's ``configs`` declare as the ``train`` split (and what an upload owns)."""

    @property
    def card(self) -> Path:
        return self.root / self.CARD_NAME

    @property
    def data(self) -> Path:
        return self.root / self.DATA_DIR

    @property
    def images_dir(self) -> Path:
        return self.root / self.IMAGES_DIR

    def images(self) -> tuple[Path, ...]:
        """The card's chart files, in name order (none when the folder has no charts)."""
        return tuple(sorted(p for p in self.images_dir.glob("*.png") if p.is_file()))

    @staticmethod
    def shard_name(i: int, n: int) -> str:
        """Path of shard ``i`` of ``n`` inside the folder, as the Hub names it."""
        if not 0 <= i < n or n > 99_999:
            raise ValueError(f"no shard {i} of {n}")
        return f"data/train-{i:05d}-of-{n:05d}.parquet"

    def shards(self) -> tuple[Path, ...]:
        """The ``data/train-*.parquet`` shards, in order; raise unless they form one set."""
        if not self.data.is_dir():
            raise ContagentError(f"{self.root}: no {self.DATA_DIR}/ folder with Parquet shards")
        found: dict[int, Path] = {}
        totals: set[int] = set()
        for entry in self.data.iterdir():
            if not entry.name.startswith("train-"):
                continue
            match = _SHARD.match(entry.name)
            if not match or not entry.is_file():
                raise ContagentError(f"{entry}: not a shard named train-NNNNN-of-NNNNN.parquet")
            found[int(match.group(1))] = entry
            totals.add(int(match.group(2)))
        if not found:
            raise ContagentError(f"{self.data}: no train-NNNNN-of-NNNNN.parquet shards")
        if len(totals) != 1:
            counts = ", ".join(str(t) for t in sorted(totals))
            raise ContagentError(
                f"{self.data}: shards from different exports are mixed (of {counts})"
            )
        (total,) = totals
        if sorted(found) != list(range(total)):
            missing = sorted(set(range(total)) - set(found))
            raise ContagentError(
                f"{self.data}: shard set of {total} is incomplete (missing {missing})"
            )
        return tuple(found[i] for i in range(total))


_SHARD = re.compile(r"^train-(\d{5})-of-(\d{5})\.parquet$")


@dataclass(frozen=True)
class DocumentFolderPaths:
    """One document format's folder inside an export: a JSON file per rollout and an index.

    ::

        <root>/                       e.g. OUT/atif
        ├── _index.json               the filter, the documents written, the rollouts left out
        ├── <rollout_id>.json         one document per written rollout
        └── ...

    No rollout id can be ``_index`` (a safe segment starts with a letter or digit).
    """

    root: Path

    INDEX_NAME = "_index.json"

    @property
    def index(self) -> Path:
        return self.root / self.INDEX_NAME

    @staticmethod
    def document_name(rollout_id: str) -> str:
        """The file name of a rollout's document; raises unless the id is a safe segment."""
        return f"{safe_segment(rollout_id, 'rollout id')}.json"

    def document(self, rollout_id: str) -> Path:
        return self.root / self.document_name(rollout_id)


@dataclass(frozen=True)
class ExportPaths:
    """The tree ``contagent export --out OUT`` writes.

    ::

        <root>/
        ├── results.jsonl          one row per rollout read (always written)
        ├── export-summary.json    what the export did (the CLI prints it)
        ├── prime-sft/             a DatasetFolderPaths per Parquet --format given
        ├── trl/
        └── atif/                  a DocumentFolderPaths per document --format given

    Files are written under hidden temporary names beside their final ones and
    renamed when complete.
    """

    root: Path

    RESULTS_NAME = "results.jsonl"

    @property
    def results(self) -> Path:
        return self.root / self.RESULTS_NAME

    @property
    def summary(self) -> Path:
        return self.root / "export-summary.json"

    @staticmethod
    def staging(final: Path) -> Path:
        """The temporary name ``final`` is written under before it is renamed into place."""
        return final.with_name(f".{final.name}.tmp")

    def format_folder(self, name: str) -> DatasetFolderPaths:
        """The dataset folder of the training format ``name`` (``prime-sft``, ``trl``)."""
        return DatasetFolderPaths(self.root / safe_segment(name, "format name"))

    def document_folder(self, name: str) -> DocumentFolderPaths:
        """The folder of the document format ``name`` (``atif``)."""
        return DocumentFolderPaths(self.root / safe_segment(name, "format name"))

    @classmethod
    def of_results(cls, results: Path) -> ExportPaths:
        """The export tree that holds ``results`` (a ``results.jsonl``)."""
        return cls(Path(results).parent)
