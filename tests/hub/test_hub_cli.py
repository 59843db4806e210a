"""``contagent upload`` as a user runs it: a fresh process, HF_ENDPOINT at the stand-in Hub."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from fake_hub import FakeHub
from hub_samples import build_folder

from tests.helpers import cli

REPO = "acme/agent-sft"


def _run(
    args: list[str], hub: FakeHub, tmp_path: Path, token: str | None, command: str = "upload"
) -> subprocess.CompletedProcess:
    """``contagent COMMAND ARGS`` in a fresh process whose Hub is the stand-in."""
    env: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("HF_", "HUGGING_FACE"))
    }  # nothing of this machine's Hub settings
    env |= {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf-home"),  # no saved login
        "HF_HUB_DISABLE_XET": "1",
        "NO_COLOR": "1",
        "COLUMNS": "200",
        "HF_TOKEN": token,
    }
    return cli(command, *args, env=env)


def _assert_one_line_error(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("contagent: error: ")
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr


def test_upload_then_upload_again(tmp_path: Path, fake_hub: FakeHub) -> None:
    folder = tmp_path / "prime-sft"
    build_folder(folder, n_rows=5, shard_rows=2)
    proc = _run(
        [str(folder), "--repo-id", REPO, "--message", "from the CLI"],
        fake_hub,
        tmp_path,
        "hf_write",
    )
    assert proc.returncode == 0, proc.stderr
    (commit,) = fake_hub.commits
    assert commit.summary == "from the CLI"
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert sorted(commit.files) == files  # shards, card and the card's chart images
    assert fake_hub.repos[REPO].private is True
    assert f"{fake_hub.url}/datasets/{REPO} (private)" in proc.stdout
    assert commit.oid in proc.stdout
    assert re.search(rf"^\s*uploaded\s+{len(files)}\s*$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^\s*unchanged\s+0\s*$", proc.stdout, re.M), proc.stdout

    again = _run([str(folder), "--repo-id", REPO, "--public"], fake_hub, tmp_path, "hf_write")
    assert again.returncode == 0, again.stderr
    assert len(fake_hub.commits) == 1
    assert "none: the Hub already holds these files" in again.stdout
    assert re.search(rf"^\s*unchanged\s+{len(files)}\s*$", again.stdout, re.M), again.stdout


def test_revision_option(tmp_path: Path, fake_hub: FakeHub) -> None:
    build_folder(tmp_path / "f", n_rows=2, shard_rows=2)
    proc = _run(
        [str(tmp_path / "f"), "--repo-id", REPO, "--revision", "exp-1", "--public"],
        fake_hub,
        tmp_path,
        "hf_write",
    )
    assert proc.returncode == 0, proc.stderr
    assert [c.revision for c in fake_hub.commits] == ["exp-1"]
    assert fake_hub.repos[REPO].private is False


@pytest.mark.parametrize(
    ("token", "repo", "expected"),
    [
        (None, REPO, "no Hugging Face token: set HF_TOKEN or log in"),
        ("hf_bogus", REPO, "HTTP 401"),
        (
            "hf_write",
            "someone-else/data",
            "refused creating dataset repo someone-else/data: HTTP 403",
        ),
    ],
)
def test_refusals_are_one_line_errors(
    tmp_path: Path, fake_hub: FakeHub, token: str | None, repo: str, expected: str
) -> None:
    build_folder(tmp_path / "f", n_rows=2, shard_rows=2)
    proc = _run([str(tmp_path / "f"), "--repo-id", repo], fake_hub, tmp_path, token)
    _assert_one_line_error(proc, expected)
    assert fake_hub.commits == [] and fake_hub.lfs_puts == []
    if token is None:
        assert fake_hub.requests == []


def test_bad_folder_is_a_one_line_error(tmp_path: Path, fake_hub: FakeHub) -> None:
    (tmp_path / "empty").mkdir()
    proc = _run([str(tmp_path / "empty"), "--repo-id", REPO], fake_hub, tmp_path, "hf_write")
    _assert_one_line_error(proc, "no README.md dataset card")
    assert fake_hub.requests == []
