"""Server-sent events: split a byte stream into events, incrementally.

:class:`SSEParser` turns arbitrarily chunked bytes into ``data`` payloads (one
string per event, multi-line data joined with ``\\n``), following the WHATWG
event-stream rules for line endings, comments and field names, so the proxy never
holds a whole stream before passing it on. :mod:`contagent.wire.stream_fold`
folds the payloads into the completion they make.
"""

from __future__ import annotations


class SSEParser:
    """Incremental event-stream parser; feed bytes, get complete ``data`` payloads."""

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Add ``chunk``; return the payloads of the events it completed."""
        data = self._buf + chunk if self._buf else chunk
        if b"\r" in data:
            # A CR at the very end may be the first half of a CRLF: wait for the next chunk.
            keep_cr = data.endswith(b"\r")
            if keep_cr:
                data = data[:-1]
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                data += b"\r"
        out: list[str] = []
        if not self._data and data.startswith(b"data: ") and data.endswith(b"\n\n"):
            # Fastest path, the shape every OpenAI-compatible server sends: only
            # "data: <one line>\n\n" events. Then every newline belongs to a
            # separator, and one split finds them all (JSON never holds a raw newline).
            # (the ASCII separator survives decoding with "replace" unchanged)
            parts = data[6:-2].decode("utf-8", "replace").split("\n\ndata: ")
            if data.count(b"\n") == 2 * len(parts):
                self._buf = b""
                return parts
        if not self._data and b"\n\n" in data:
            # fast path for whole events: servers send "data: <json>\n\n", one line each
            blocks = data.split(b"\n\n")
            data = blocks.pop()
            for block in blocks:
                if block.startswith(b"data: ") and b"\n" not in block:
                    out.append(block[6:].decode("utf-8", "replace"))
                else:
                    self._lines([*block.split(b"\n"), b""], out)
        lines = data.split(b"\n")
        self._buf = lines.pop()
        self._lines(lines, out)
        return out

    def _lines(self, lines: list[bytes], out: list[str]) -> None:
        for line in lines:
            if not line:
                if self._data:
                    out.append(b"\n".join(self._data).decode("utf-8", "replace"))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            elif line == b"data":
                self._data.append(b"")
            # comments (":...") and other fields (event, id, retry) carry nothing we keep

    @property
    def at_boundary(self) -> bool:
        """True when the bytes so far end exactly between two events."""
        return not self._buf and not self._data

    def close(self) -> tuple[list[str], bytes]:
        """End of stream: ``(payloads of a final event left unterminated, partial line bytes)``.

        The spec drops an event that never got its blank line; servers that
        omit the last blank line still meant it, so its complete data lines
        are returned. A partial last line is returned raw for the record.
        """
        tail = self._buf
        if tail.endswith(b"\r"):
            tail = tail[:-1]
        out: list[str] = []
        if self._data:
            out.append(b"\n".join(self._data).decode("utf-8", "replace"))
        self._buf = b""
        self._data = []
        return out, tail
