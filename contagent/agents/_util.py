"""Small helpers the agent modules share (pure, apart from reading the collected files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

#: a bound on what is read back of an agent's own output (it is untrusted)
LOG_LIMIT_BYTES = 256 * 1024 * 1024


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or an empty dict when it is absent or unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def jsonl_objects(path: Path) -> list[bytes]:
    """The JSON-object lines of ``path`` (the agent's own log), re-serialised one per line.

    A line that is not a JSON object (a torn last line, stray output) is kept as
    ``{"unparsed": "<text>"}`` so that ``<name>.log`` stays one JSON object a line.
    """
    try:
        data = path.read_bytes()[:LOG_LIMIT_BYTES]
    except OSError:
        return []
    out: list[bytes] = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            value = {"unparsed": line.decode("utf-8", errors="replace")}
        out.append(orjson.dumps(value))
    return out
