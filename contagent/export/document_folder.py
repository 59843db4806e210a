"""Write a document folder (``OUT/<format>/``): one JSON file per rollout, then the index.

The files and the index are written into a hidden staging folder beside the final one,
which is swapped in whole when the index is complete, so a folder never holds a mix
of two exports' documents or documents that its index does not list.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Literal

import orjson

from contagent.errors import ContagentError
from contagent.export.formats.documents import DocumentFormat, DocumentIndex, LeftOut, Written
from contagent.export.formats.version import SCHEMA_VERSION
from contagent.layout import DocumentFolderPaths
from contagent.model_schema import plain_dump


class DocumentWriter:
    """Collect one export's documents for ``folder`` and swap them in on :meth:`close`."""

    def __init__(
        self,
        folder: Path,
        fmt: DocumentFormat,
        filter: Literal["passed", "all"],
        formats: list[str],
    ) -> None:
        self.folder = Path(folder)
        self._staging = self.folder.with_name(f".{self.folder.name}-staging-{secrets.token_hex(4)}")
        self._index = DocumentIndex.model_construct(
            format=fmt.name,
            records_version=SCHEMA_VERSION,
            document_version=fmt.document_version,
            filter=filter,
            formats=formats,
            written=[],
            left_out=[],
        )
        try:
            self._staging.mkdir(parents=True)
        except OSError as exc:
            raise ContagentError(f"cannot create {self._staging}: {exc}") from exc

    @property
    def written(self) -> int:
        return len(self._index.written)

    def add(self, rollout_id: str, document: bytes | None, reason: str | None) -> None:
        """Write a rollout's document (JSON bytes), or record why it is left out."""
        if document is None:
            self._index.left_out.append(
                LeftOut.model_construct(rollout_id=rollout_id, reason=reason or "")
            )
            return
        name = DocumentFolderPaths.document_name(rollout_id)
        try:
            (self._staging / name).write_bytes(document)
        except OSError as exc:
            raise ContagentError(f"cannot write {self._staging / name}: {exc}") from exc
        self._index.written.append(Written.model_construct(rollout_id=rollout_id, file=name))

    def close(self) -> list[Path]:
        """Write the index and swap the staging folder in; return the documents' paths."""
        index = orjson.dumps(plain_dump(self._index), option=orjson.OPT_INDENT_2)
        (self._staging / DocumentFolderPaths.INDEX_NAME).write_bytes(index)
        old = self.folder.with_name(f".{self.folder.name}-old-{secrets.token_hex(4)}")
        try:
            if self.folder.exists():
                os.replace(self.folder, old)
            os.replace(self._staging, self.folder)
        except OSError as exc:
            raise ContagentError(f"cannot put {self.folder} in place: {exc}") from exc
        shutil.rmtree(old, ignore_errors=True)
        return [self.folder / w.file for w in self._index.written]

    def abort(self) -> None:
        shutil.rmtree(self._staging, ignore_errors=True)
