"""The card's front matter is PyYAML's text, whichever writer wrote it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from contagent.export import card_yaml
from contagent.export.card_yaml import front_matter

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def pyyaml(data: dict[str, Any]) -> str:
    return str(yaml.dump(data, sort_keys=False, allow_unicode=True)).strip()


def written_plain(data: dict[str, Any]) -> bool:
    """Whether :func:`front_matter` wrote ``data`` itself (no fallback to PyYAML)."""
    try:
        card_yaml._mapping(data, 0, [])
    except card_yaml._Unplain:
        return False
    return True


# names like a card's, and strings PyYAML quotes, folds or reads back as another type
WORDS = st.sampled_from(
    ["name", "dtype", "string", "int64", "n<1K", "data/train-*", "README.md", "cc-by-4.0",
     "contagent Prime-SFT", "apache-2.0", "yes", "No", "NULL", "on", "y", "n", "true",
     "1.5", "007", "2024-01-01", "-x", "a: b", "a #b", "*star", "&a", "!t", "'q", '"q"',
     "%p", "@a", "`b", "|", ">", "?", "", " lead", "trail ", "two  spaces", "é", "a\nb",
     "x" * 81, "word " * 20, "~", ".inf", "e5", "0x1F", "<<", "=", "a,b", "[a]", "{a}"]
)  # fmt: skip
SCALARS = WORDS | st.integers(-(10**12), 10**12) | st.booleans() | st.none() | st.floats()
DATA = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(WORDS, inner, max_size=4),
    max_leaves=25,
)


# what a card holds: names PyYAML writes plain, integers, nested lists of mappings
PLAIN_WORDS = st.from_regex(
    r"[A-Za-z][A-Za-z0-9_.<>/*+-]{0,12}( [A-Za-z0-9_.()-]{1,8}){0,2}", fullmatch=True
)
PLAIN = st.recursive(
    PLAIN_WORDS | st.integers(-(10**12), 10**12) | st.booleans(),
    lambda inner: (
        st.lists(
            st.dictionaries(PLAIN_WORDS, inner, min_size=1, max_size=3) | PLAIN_WORDS,
            min_size=1,
            max_size=3,
        )
        | st.dictionaries(PLAIN_WORDS, inner, min_size=1, max_size=3)
    ),
    max_leaves=30,
)


@given(st.dictionaries(WORDS, DATA, min_size=1, max_size=6))
def test_front_matter_is_pyyaml_text(data: dict[str, Any]) -> None:
    assert front_matter(data) == pyyaml(data)


@given(st.dictionaries(PLAIN_WORDS, PLAIN, min_size=1, max_size=6))
def test_card_shaped_data_is_pyyaml_text(data: dict[str, Any]) -> None:
    assert front_matter(data) == pyyaml(data)


@pytest.mark.parametrize("card", sorted(GOLDEN.rglob("README.md")), ids=str)
def test_the_golden_cards_front_matter_is_written_without_pyyaml(card: Path) -> None:
    data = yaml.safe_load(card.read_text().split("---\n")[1])
    assert written_plain(data)
    assert front_matter(data) == pyyaml(data)


@pytest.mark.parametrize(
    "value", ["yes", "a: b", "x" * 81, "é", "", "1.5", "2024-01-01", "-x", "a #b", 1.5, None]
)
def test_what_pyyaml_would_quote_or_fold_goes_to_pyyaml(value: Any) -> None:
    data = {"license": "other", "tags": ["contagent", value]}
    assert not written_plain(data)
    assert front_matter(data) == pyyaml(data)


def test_an_export_writes_its_card_without_importing_pyyaml(samples: Path, tmp_path: Path) -> None:
    code = (
        "import sys; from contagent.cli import main; sys.argv = ['contagent', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('yaml loaded:', 'yaml' in sys.modules, file=sys.stderr)"
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", code, "export", str(samples), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert (out / "prime-sft" / "README.md").is_file(), proc.stderr
    assert "yaml loaded: False" in proc.stderr
