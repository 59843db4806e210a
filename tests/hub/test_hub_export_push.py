"""``contagent export --push-to-hub``: export, then one commit of shards and card to the stand-in Hub."""

from __future__ import annotations

from pathlib import Path

from fake_hub import FakeHub
from test_hub_cli import _run

from tools.samples import write_samples

REPO = "acme/agent-sft"


def _export(args: list[str], hub: FakeHub, tmp_path: Path, token: str | None):
    return _run(args, hub, tmp_path, token, command="export")


def test_export_push_to_hub(tmp_path: Path, fake_hub: FakeHub) -> None:
    runs = tmp_path / "runs"
    write_samples(runs)
    out = tmp_path / "out"
    proc = _export(
        [str(runs), "--out", str(out), "--push-to-hub", REPO], fake_hub, tmp_path, "hf_write"
    )
    assert proc.returncode == 0, proc.stderr
    (commit,) = fake_hub.commits
    folder = out / "prime-sft"
    local = {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }
    assert set(commit.files) == set(local) and "README.md" in local
    assert all(commit.files[name] == data for name, data in local.items())
    assert fake_hub.repos[REPO].private is True


def test_export_push_without_token_fails_before_exporting(
    tmp_path: Path, fake_hub: FakeHub
) -> None:
    runs = tmp_path / "runs"
    write_samples(runs)
    out = tmp_path / "out"
    proc = _export([str(runs), "--out", str(out), "--push-to-hub", REPO], fake_hub, tmp_path, None)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("contagent: error:"), proc.stderr
    assert not out.exists() and not fake_hub.commits
