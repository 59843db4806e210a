"""A small text file a user hands in: bounded, UTF-8, every failure one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from contagent.cli.rl_options import chat_template
from contagent.errors import ContagentError
from contagent.textfile import read_text


def test_a_file_within_the_limit_is_its_text(tmp_path: Path) -> None:
    path = tmp_path / "t.md"
    path.write_text("héllo")
    assert read_text(path, 6, "the note") == "héllo"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "cannot read the note (No such file or directory)"),
        (b"x" * 7, "the note over 6 bytes"),
        (b"\xff\xfe", "not UTF-8 text (invalid start byte)"),
    ],
)
def test_each_failure_is_one_line_naming_the_file(
    tmp_path: Path, data: bytes | None, message: str
) -> None:
    path = tmp_path / "t.md"
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(ContagentError) as err:
        read_text(path, 6, "the note")
    assert str(err.value) == f"{path}: {message}"
    with pytest.raises(ContagentError) as err:
        read_text(path, 6, "the note", named=f"--opt {path}")
    assert str(err.value) == f"--opt {path}: {message}"


def test_the_chat_template_option_reads_its_file_so(tmp_path: Path) -> None:
    path = tmp_path / "template.jinja"
    path.write_text("{{ messages }}")
    assert chat_template(path) == "{{ messages }}"
    path.write_text("  \n")
    with pytest.raises(ContagentError, match=r"^--chat-template .*: the file is empty$"):
        chat_template(path)
    with pytest.raises(ContagentError, match=r"^--chat-template .*: cannot read the template"):
        chat_template(tmp_path / "missing")
