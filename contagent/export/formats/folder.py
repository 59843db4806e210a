"""Reading a dataset folder back: the card and one complete, readable set of shards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from contagent.errors import ContagentError
from contagent.layout import DatasetFolderPaths


@dataclass(frozen=True)
class DatasetFolder:
    """A dataset folder checked to be complete: a card and one consistent set of shards."""

    root: Path
    card: Path
    shards: tuple[Path, ...]
    images: tuple[Path, ...] = ()
    """The card's charts, uploaded with it."""

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def parquet_metadata(path: Path) -> pq.FileMetaData:
    """The footer of a Parquet file, or a one-line error naming it."""
    try:
        return pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        raise ContagentError(f"{path}: not a readable Parquet file ({exc})") from exc


def read_dataset_folder(folder: Path) -> DatasetFolder:
    """Check that ``folder`` is a complete dataset folder (card + readable shards)."""
    paths = DatasetFolderPaths(Path(folder))
    if not paths.root.is_dir():
        raise ContagentError(f"{paths.root}: no such dataset folder")
    if not paths.card.is_file() or paths.card.stat().st_size == 0:
        raise ContagentError(f"{paths.root}: no {paths.CARD_NAME} dataset card")
    shards = paths.shards()
    for shard in shards:
        parquet_metadata(shard)
    return DatasetFolder(root=paths.root, card=paths.card, shards=shards, images=paths.images())
