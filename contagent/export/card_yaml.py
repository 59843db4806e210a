"""A dataset card's front matter as PyYAML writes it, without importing PyYAML.

A card's metadata is mappings, lists, integers and short names (features, dtypes,
tags, a license id); PyYAML writes each of those plain, and importing it costs an
export about 0.016 s of CPU. :func:`front_matter` writes the same text for data
of that shape, and hands anything else (a string PyYAML would quote or fold, a
float, an empty collection, a list in a list) to PyYAML itself, so the card's
bytes never depend on which writer ran. A test holds it to PyYAML on generated data.
"""

from __future__ import annotations

import re
from typing import Any

#: strings PyYAML writes plain in block style: a letter first, then letters, digits and
#: a few marks, words single-spaced, nothing it would read back as another type
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.<>/*+-]*(?: [A-Za-z0-9_.<>/*+()-]+)*")
#: YAML 1.1 booleans and nulls that start with a letter (PyYAML quotes them)
_RESERVED = frozenset(
    w
    for word in ("yes", "no", "true", "false", "on", "off", "null")
    for w in (word, word.capitalize(), word.upper())
)
#: PyYAML folds a line past 80 columns at a space; shorter lines are never folded
_WIDTH = 80


class _Unplain(Exception):
    """Data outside the shape written here."""


def front_matter(data: dict[str, Any]) -> str:
    """``yaml.dump(data, sort_keys=False, allow_unicode=True).strip()``."""
    lines: list[str] = []
    try:
        _mapping(data, 0, lines)
    except _Unplain:
        import yaml

        return str(yaml.dump(data, sort_keys=False, allow_unicode=True)).strip()
    return "\n".join(lines)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value not in _RESERVED:
        return value
    raise _Unplain


def _line(lines: list[str], text: str) -> None:
    if len(text) > _WIDTH:
        raise _Unplain
    lines.append(text)


def _mapping(data: Any, indent: int, lines: list[str], lead: str | None = None) -> None:
    """Each ``key: value`` of ``data`` at ``indent``; ``lead`` starts the first line (``- ``
    of the list item the mapping is)."""
    if not isinstance(data, dict) or not data:
        raise _Unplain
    for key, value in data.items():
        head = (" " * indent if lead is None else lead) + _scalar(key) + ":"
        lead = None
        if isinstance(value, dict):
            _line(lines, head)
            _mapping(value, indent + 2, lines)
        elif isinstance(value, list):
            _line(lines, head)
            _sequence(value, indent, lines)
        else:
            _line(lines, f"{head} {_scalar(value)}")


def _sequence(items: list[Any], indent: int, lines: list[str]) -> None:
    """A block list under a mapping key: its ``- `` at the key's own indent."""
    if not items:
        raise _Unplain
    for item in items:
        lead = " " * indent + "- "
        if isinstance(item, dict):
            _mapping(item, indent + 2, lines, lead)
        elif isinstance(item, list):
            raise _Unplain
        else:
            _line(lines, lead + _scalar(item))
