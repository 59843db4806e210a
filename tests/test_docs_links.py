"""Every relative link in the README and docs/ names a file that exists, and a heading in it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from tests.helpers import REPO

_MD = MarkdownIt("commonmark").enable("table")
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])


def _walk(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        yield token
        if token.children:
            yield from _walk(token.children)


def slug(text: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The heading anchors of a Markdown file (a repeated heading gets -1, -2, ...)."""
    tokens = _MD.parse(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            inline = tokens[i + 1]
            text = "".join(
                c.content for c in inline.children or [] if c.type in ("text", "code_inline")
            )
            base = slug(text)
            n = seen.get(base, 0)
            seen[base] = n + 1
    return {base if k == 0 else f"{base}-{k}" for base, count in seen.items() for k in range(count)}


def links(path: Path) -> list[str]:
    """Link and image targets, outside code; HTML comments (unrendered) hold none."""
    found = []
    for token in _walk(_MD.parse(path.read_text(encoding="utf-8"))):
        if token.type == "link_open":
            found.append(str(token.attrs["href"]))
        elif token.type == "image":
            found.append(str(token.attrs["src"]))
    return found


def broken(path: Path) -> list[str]:
    problems = []
    for target in links(path):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            continue
        dest = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif parts.fragment and dest.suffix == ".md" and parts.fragment not in anchors(dest):
            problems.append(f"{target}: no heading #{parts.fragment} in {dest.name}")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path: Path) -> None:
    assert links(path) or path.name != "README.md"
    assert broken(path) == []


def test_the_check_catches_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## A section: with, punctuation\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#a-section-with-punctuation) [ok](#here)\n\n"
        "## Here\n\n[gone](missing.md) [bad](other.md#nowhere) [bad](#nowhere)\n\n"
        "`[code](missing.md)`\n\n```\n[fenced](missing.md)\n```\n\n"
        "<!-- [comment](missing.md) -->\n\n[web](https://example.org/x.md)\n"
    )
    assert broken(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading #nowhere in other.md",
        "#nowhere: no heading #nowhere in page.md",
    ]


def test_the_readme_stays_short() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
