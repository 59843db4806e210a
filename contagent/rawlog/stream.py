"""The record stream of a raw log, read in bounded chunks of whole lines.

A raw log is ``exchanges.jsonl`` or the compacted ``exchanges.jsonl.zst``; either
way what readers see is its record stream (the plain bytes), read a chunk at a time
(a compacted log is decompressed as it is read), so a reader's memory holds one
chunk and the line it is in, never the whole log. The stream counts and hashes
every plain byte as it goes and stops at ``max_bytes`` of them: a log past the
limit, a corrupt frame or a decompression bomb is one error naming the file.

The limit is known before the first line is parsed: a plain log's size is on
disk, and a compacted log's frames declare theirs (a frame that does not is
decompressed once, counting, before it is read), so a log past the limit is
refused with the limit's error whatever its lines hold, as a whole read refused it.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

import zstandard

from contagent.errors import ContagentError

#: The default raw-log size limit, in plain (decompressed) bytes, for every reader.
MAX_RAW_LOG_BYTES = 1 << 30
#: How a raw log is compacted: zstd level 3, long-distance matching over a 2^27-byte
#: window (``zstd -d --long=27`` reads it). Readers refuse frames that need a larger
#: window, which bounds their memory.
ZSTD_LEVEL = 3
ZSTD_WINDOW_LOG = 27
#: plain bytes read (or decompressed) at a time
CHUNK = 4 << 20


def zstd_decompressor() -> zstandard.ZstdDecompressor:
    return zstandard.ZstdDecompressor(max_window_size=1 << ZSTD_WINDOW_LOG)


#: One block of whole lines: ``buffer[start:stop]`` holds one or more lines, each
#: ending in a newline.
Block = tuple[bytes | bytearray, int, int]


def line_blocks(chunks: Iterable[bytes]) -> Iterator[Block]:
    """The whole lines of a stream given in chunks, as blocks of the chunks themselves.

    Lines inside one chunk are never copied; a line that spans chunks is joined
    into a block of its own. A last line without a newline gets one, as a reader
    of the whole log would add it.
    """
    head: list[bytes | memoryview] = []  # the pieces of a line begun in earlier chunks
    for chunk in chunks:
        start = 0
        if head:
            first = chunk.find(b"\n")
            if first < 0:
                head.append(chunk)
                continue
            head.append(memoryview(chunk)[: first + 1])
            line = b"".join(head)
            head = []
            yield line, 0, len(line)
            start = first + 1
        stop = chunk.rfind(b"\n", start) + 1
        if stop > start:
            yield chunk, start, stop
        if len(chunk) > max(stop, start):
            head.append(memoryview(chunk)[max(stop, start) :])
    if head:
        head.append(b"\n")
        line = b"".join(head)
        yield line, 0, len(line)


class Sha256:
    """The SHA-256 of a stream, hashed on another thread while the main one parses it:
    hashlib releases the GIL while it hashes, so a second core hides its cost.

    A stream under ``_THREAD_FROM`` bytes is hashed when the digest is asked for; the
    queue to the thread is short, so the chunks it holds stay few.
    """

    _THREAD_FROM = 1 << 20

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: threading.Thread | None = None
        self._digest: str | None = None
        self._finished = False

    def update(self, chunk: bytes) -> None:
        if self._queue is not None:
            self._queue.put(chunk)
            return
        self._held.append(chunk)
        self._held_bytes += len(chunk)
        if self._held_bytes >= self._THREAD_FROM:
            self._queue = queue.Queue(maxsize=1)
            self._thread = threading.Thread(target=self._run, name="contagent-sha256", daemon=True)
            self._thread.start()
            held, self._held = self._held, []
            for piece in held:
                self._queue.put(piece)

    def _run(self) -> None:
        assert self._queue is not None
        while (chunk := self._queue.get()) is not None:
            self._sha.update(chunk)

    def hexdigest(self) -> str:
        """The digest of everything given (waits for the thread, if still at work)."""
        if self._digest is None:
            self.finish()
            if self._thread is not None:
                self._thread.join()
                self._thread = None
            for piece in self._held:
                self._sha.update(piece)
            self._held = []
            self._digest = self._sha.hexdigest()
        return self._digest

    def finish(self) -> None:
        """The end of the input: the thread stops once it has hashed what it was given."""
        if self._queue is not None and not self._finished:
            self._finished = True
            self._queue.put(None)


class LogStream:
    """The record stream of the raw log ``path`` (either form), or of ``data`` given in
    memory, at most ``max_bytes`` plain bytes; read it once, through :meth:`blocks` or
    :meth:`chunks`. ``size`` and ``digest`` cover what was read."""

    def __init__(
        self, path: Path, max_bytes: int, chunk: int = CHUNK, data: bytes | None = None
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.chunk = chunk
        self.size = 0
        self.digest = Sha256()
        #: whether every byte was read (the size and digest are the whole stream's)
        self.complete = False
        self._data = data
        self._chunks: Iterator[bytes] = iter(())

    def blocks(self) -> Iterator[Block]:
        """The stream's whole lines, a block at a time (:func:`line_blocks`)."""
        self._chunks = self.chunks()
        return line_blocks(self._chunks)

    def drain(self) -> None:
        """Read what is left of the stream :meth:`blocks` gave, raising the limit's error if
        it passes the limit: a reader that met a bad line reports the limit first, as a
        whole read did."""
        for _ in self._chunks:
            pass

    def chunks(self) -> Iterator[bytes]:
        """Each chunk of plain bytes in turn, counted and hashed."""
        try:
            if self._data is not None:
                yield from self._counted(bytes_stream(self._data, self.chunk))
            else:
                with self.path.open("rb", buffering=0) as fh:
                    yield from self._counted(_pieces(self._open(fh), self.chunk))
            self.complete = True
        except FileNotFoundError:
            raise ContagentError(f"{self.path}: raw exchange log not found") from None
        except zstandard.ZstdError as exc:
            raise CorruptLog.of(self.path, str(exc)) from None
        except OSError as exc:
            raise ContagentError(f"{self.path}: cannot read ({exc.strerror})") from None
        finally:
            self.digest.finish()

    def _counted(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in pieces:
            self.size += len(chunk)
            if self.size > self.max_bytes:
                raise too_large(self.path, self.max_bytes)
            self.digest.update(chunk)
            yield chunk

    def _open(self, fh: IO[bytes]) -> Callable[[int], bytes]:
        """How to read ``fh``'s plain bytes, once the limit is known to hold."""
        size = os.fstat(fh.fileno()).st_size
        if self.path.suffix != ".zst":
            if size > self.max_bytes:
                raise too_large(self.path, self.max_bytes)
            return fh.read
        # a compressed log may be a little larger than its content (incompressible bytes)
        if size > self.max_bytes + (self.max_bytes >> 7) + 65_536:
            raise too_large(self.path, self.max_bytes)
        try:
            with self.path.open("rb", buffering=1 << 16) as walk:
                declared = [frame_size for _, frame_size in frames(walk, size)]
        except (ValueError, zstandard.ZstdError) as exc:
            raise CorruptLog.of(self.path, str(exc)) from None
        if sum(max(s, 0) for s in declared) > self.max_bytes:
            raise too_large(self.path, self.max_bytes)
        if -1 in declared:  # counted before any line is read: bounds a bomb's one line too
            reader = zstd_decompressor().stream_reader(fh, read_across_frames=True)
            counted = 0
            for piece in _pieces(reader.read, self.chunk):
                counted += len(piece)
                if counted > self.max_bytes:
                    raise too_large(self.path, self.max_bytes)
            fh.seek(0)
        reader = zstd_decompressor().stream_reader(fh, read_across_frames=True)
        return reader.read


class CorruptLog(ContagentError):
    """A compacted log whose zstd data does not decompress whole (cut short, a flipped bit,
    a frame this reader refuses). Nothing read from it can be trusted: zstd checks a frame's
    content only at its end, so bytes it gave before may be wrong too."""

    def __init__(self, path: Path, offset: int, detail: str) -> None:
        super().__init__(f"{path}: corrupt compacted log: zstd fails at byte {offset} ({detail})")
        self.offset = offset

    @classmethod
    def of(cls, path: Path, detail: str) -> CorruptLog:
        return cls(path, failing_offset(path), detail)


#: compressed bytes fed at a time while :func:`failing_offset` looks for the bad one
_PROBE = 1024


def failing_offset(path: Path) -> int:
    """The byte of the compacted log ``path`` at which zstd fails, to within :data:`_PROBE`
    bytes: the end of the piece whose decompression raised, or the file's length when none
    did (it ends inside a frame). Decompresses the file once more, on the error path only."""
    dctx = zstd_decompressor()
    dobj = dctx.decompressobj()
    offset = 0
    with Path(path).open("rb") as fh:
        while piece := fh.read(_PROBE):
            offset += len(piece)
            try:
                while piece:
                    dobj.decompress(piece)
                    piece = dobj.unused_data if dobj.eof else b""
                    if dobj.eof:
                        dobj = dctx.decompressobj()
            except zstandard.ZstdError:
                return offset
    return offset


def _pieces(read: Callable[[int], bytes], chunk: int) -> Iterator[bytes]:
    while piece := read(chunk):
        yield piece


def too_large(path: Path, max_bytes: int) -> ContagentError:
    return ContagentError(
        f"{path}: raw log holds more than {max_bytes} bytes, the raw-log limit (--max-raw-log)"
    )


def read_log_bytes(path: Path, max_bytes: int = MAX_RAW_LOG_BYTES) -> bytes:
    """The whole record stream of the raw log ``path`` in memory (small logs and tests;
    readers of logs of any size iterate a :class:`LogStream`)."""
    return b"".join(LogStream(Path(path), max_bytes).chunks())


def iter_lines(path: Path, max_bytes: int = MAX_RAW_LOG_BYTES) -> Iterator[memoryview]:
    """Each line of the raw log ``path``, without its newline, read a chunk at a time."""
    for buf, start, stop in LogStream(Path(path), max_bytes).blocks():
        view = memoryview(buf)
        while start < stop:
            end = buf.find(b"\n", start, stop)
            yield view[start:end]
            start = end + 1


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # the 16 magic numbers of skippable frames share these bits


def frames(fh: IO[bytes], length: int) -> Iterator[tuple[int, int]]:
    """The offset and declared content size (-1: not declared) of each zstd frame of the
    file ``fh`` of ``length`` bytes.

    Walks the frame and block headers only, reading a few bytes at each (the package
    exposes no frame-size function); a file that ends inside a frame or holds anything
    but frames raises.
    """

    def at(pos: int, n: int) -> bytes:
        fh.seek(pos)
        return fh.read(n)

    pos = 0
    if not length:
        raise ValueError("the file is empty")
    while pos < length:
        head = at(pos, 18)
        magic = int.from_bytes(head[:4], "little")
        if magic & 0xFFFFFFF0 == _SKIPPABLE:
            pos += 8 + int.from_bytes(head[4:8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise ValueError(f"no zstd frame at byte {pos}")
        params = zstandard.get_frame_parameters(head)
        end = pos + zstandard.frame_header_size(head)
        last = False
        while not last:
            if end + 3 > length:
                raise ValueError("the file ends inside a frame")
            block = int.from_bytes(at(end, 3), "little")
            last, kind, size = bool(block & 1), (block >> 1) & 3, block >> 3
            end += 3 + (1 if kind == 1 else size)
        end += 4 if params.has_checksum else 0
        if end > length:
            raise ValueError("the file ends inside a frame")
        size = params.content_size
        yield pos, (-1 if size == zstandard.CONTENTSIZE_UNKNOWN else size)
        pos = end


def bytes_stream(data: bytes, chunk: int = CHUNK) -> Iterator[bytes]:
    """``data`` in chunks, as a stream of a log in memory gives it."""
    for start in range(0, len(data), chunk):
        yield data[start : start + chunk]
