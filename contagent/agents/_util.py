"""Small helpers the agent modules share: launching an ``inside/`` program, reading back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from contagent.agents.base import AGENT_DIR, Launch

#: a bound on what is read back of an agent's own output (it is untrusted)
LOG_LIMIT_BYTES = 256 * 1024 * 1024


def inside_program(main: str, config: str, cfg: dict[str, Any], env: dict[str, str]) -> Launch:
    """Run ``inside/<main>`` with the image's ``/opt/venv`` Python, given ``cfg`` as ``<config>``."""
    return Launch(
        argv=["/opt/venv/bin/python", f"{AGENT_DIR}/{main}", f"{AGENT_DIR}/{config}"],
        env=env,
        files=[
            (main, (Path(__file__).with_name("inside") / main).read_bytes(), 0o644),
            (config, orjson.dumps(cfg, option=orjson.OPT_INDENT_2), 0o644),
        ],
    )


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
        with path.open("rb") as fh:  # read no more than the bound, whatever the agent wrote
            data = fh.read(LOG_LIMIT_BYTES)
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
